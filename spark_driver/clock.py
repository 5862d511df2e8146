"""Thread-side clocks for the driver (Spark's ``SystemClock`` and ``ManualClock``).

The driver runs on threads (PySpark's py4j calls block), so its clock waits with a condition
variable rather than asyncio.  ``ManualClock`` lets tests drive the job generator's timer and the
trigger policies deterministically: ``advance`` wakes every waiter whose time has come.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def time_ms(self) -> int:
        """Milliseconds since the epoch (or since the manual clock's origin)."""

    def wait_till(self, target_ms: int, stop: threading.Event | None = None) -> int:
        """Block until ``target_ms`` (or ``stop`` is set); returns the time then."""


class SystemClock:
    """Wall clock; waits in short slices so that ``stop`` interrupts promptly."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def wait_till(self, target_ms: int, stop: threading.Event | None = None) -> int:
        while True:
            now = self.time_ms()
            remaining = target_ms - now
            if remaining <= 0:
                return now
            if stop is not None:
                if stop.wait(min(remaining, 100) / 1000.0):
                    return self.time_ms()
            else:
                time.sleep(min(remaining, 100) / 1000.0)


class ManualClock:
    """A clock that only moves when told to (``advance``/``set_time``), as Spark's ManualClock."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms
        self._cond = threading.Condition()
        self._waiters = 0

    def time_ms(self) -> int:
        with self._cond:
            return self._now

    def advance(self, ms: int) -> int:
        with self._cond:
            self._now += ms
            self._cond.notify_all()
            return self._now

    def set_time(self, ms: int) -> None:
        with self._cond:
            self._now = ms
            self._cond.notify_all()

    @property
    def waiters(self) -> int:
        """Threads blocked in ``wait_till``: tests wait for this instead of sleeping."""
        with self._cond:
            return self._waiters

    def wait_for_waiters(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Block until ``count`` threads wait on this clock (the timer reached its next wait)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._waiters < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.05))
            return True

    def wait_till(self, target_ms: int, stop: threading.Event | None = None) -> int:
        with self._cond:
            self._waiters += 1
            self._cond.notify_all()
            try:
                while self._now < target_ms and not (stop is not None and stop.is_set()):
                    self._cond.wait(0.05)
                return self._now
            finally:
                self._waiters -= 1
                self._cond.notify_all()
