"""One clock for every part of Sluice, so time-driven code is tested without sleeping.

Spark injects a ``Clock`` (``SystemClock`` or ``ManualClock``) into its rate limiter, block
generator and job generator; tests advance a manual clock and the timers fire deterministically.
Sluice does the same with one clock of two faces:

* the asynchronous face (:meth:`Clock.call_at`, :meth:`Clock.sleep_until`, :meth:`Clock.sleep`)
  serves the receivers' limiter and block timer, which run on an event loop;
* the synchronous face (:meth:`Clock.wait_till`) serves the driver's job generator, which runs on
  a thread because PySpark blocks.

Times are milliseconds in the clock's own epoch.  :class:`SystemClock` reports wall-clock
milliseconds (block and batch names are wall times, as in Spark) but advances monotonically, so a
wall-clock step cannot stall a limiter or a timer.  :class:`ManualClock` moves only when a test
calls :meth:`ManualClock.advance`: callbacks that came due run inside it, and threads waiting in
``wait_till`` wake.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from sluice.errors import InvalidArgument


class TimerHandle(Protocol):
    """What :meth:`Clock.call_at` returns: the scheduled callback can be cancelled."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the limiter, the block timer, the tracker's registry and the job generator need."""

    def now_ms(self) -> float:
        """Milliseconds since the clock's epoch (the Unix epoch for :class:`SystemClock`)."""
        ...

    def wait_till(self, target_ms: float, stop: threading.Event | None = None) -> float:
        """Block this thread until ``target_ms`` (or until ``stop`` is set); return the time then."""
        ...

    def call_at(self, t_ms: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Run ``callback(*args)`` on the running event loop once the clock reaches ``t_ms``."""
        ...

    async def sleep_until(self, t_ms: float) -> None: ...

    async def sleep(self, ms: float) -> None: ...


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class SystemClock:
    """Wall-clock milliseconds that never go backwards (anchored to ``time.time`` once)."""

    def __init__(self) -> None:
        self._wall0 = time.time() * 1000.0
        self._mono0 = time.monotonic() * 1000.0

    def now_ms(self) -> float:
        return self._wall0 + (time.monotonic() * 1000.0 - self._mono0)

    def wait_till(self, target_ms: float, stop: threading.Event | None = None) -> float:
        while True:
            now = self.now_ms()
            remaining = target_ms - now
            if remaining <= 0:
                return now
            seconds = min(remaining, 100.0) / 1000.0  # short slices: a wall-clock step cannot strand us
            if stop is not None:
                if stop.wait(seconds):
                    return self.now_ms()
            else:
                time.sleep(seconds)

    def call_at(self, t_ms: float, callback: Callable[..., Any], *args: Any) -> asyncio.TimerHandle:
        delay = max(0.0, (t_ms - self.now_ms()) / 1000.0)
        return asyncio.get_running_loop().call_later(delay, callback, *args)

    async def sleep_until(self, t_ms: float) -> None:
        delay = (t_ms - self.now_ms()) / 1000.0
        if delay > 0:
            await asyncio.sleep(delay)

    async def sleep(self, ms: float) -> None:
        if ms > 0:
            await asyncio.sleep(ms / 1000.0)


class _ManualHandle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told to (``advance``/``set_time``), as Spark's ManualClock.

    Parameters:
        start_ms: the time the clock starts at.

    Coroutines woken by :meth:`advance` resume when the test next yields to the event loop; a test
    that needs to know a task is parked on the clock awaits :meth:`wait_for_sleepers` (or, for a
    thread in :meth:`wait_till`, calls :meth:`wait_for_waiters`), so no test guesses with sleeps.
    """

    def __init__(self, start_ms: float = 0) -> None:
        self._now = start_ms
        self._heap: list[tuple[float, int, _ManualHandle, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._waiters = 0  # threads inside wait_till
        self._changed: asyncio.Event | None = None

    def now_ms(self) -> float:
        with self._cond:
            return self._now

    # -- moving time ---------------------------------------------------------------------------

    def advance(self, ms: float) -> float:
        """Move time forward by ``ms``, run every callback that came due (in time order), wake waiting
        threads; return the new time."""
        with self._cond:
            target = self._now + ms
        self.set_time(target)
        return target

    def set_time(self, t_ms: float) -> None:
        with self._cond:
            if t_ms < self._now:
                raise InvalidArgument(f"ManualClock cannot go back from {self._now} to {t_ms}")
        while True:
            with self._cond:
                if not self._heap or self._heap[0][0] > t_ms:
                    self._now = t_ms
                    self._cond.notify_all()
                    return
                due, _, handle, callback, args = heapq.heappop(self._heap)
                self._now = max(self._now, due)
            self._run(handle, callback, args)  # outside the lock: a callback may read the clock

    # -- the synchronous face ------------------------------------------------------------------

    def wait_till(self, target_ms: float, stop: threading.Event | None = None) -> float:
        with self._cond:
            self._waiters += 1
            self._cond.notify_all()
            try:
                while self._now < target_ms and not (stop is not None and stop.is_set()):
                    self._cond.wait(0.05)  # ``stop`` is an Event of its own: look at it now and then
                return self._now
            finally:
                self._waiters -= 1
                self._cond.notify_all()

    @property
    def waiters(self) -> int:
        """Threads blocked in :meth:`wait_till`."""
        with self._cond:
            return self._waiters

    def wait_for_waiters(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Block until ``count`` threads wait on this clock (a timer reached its next wait)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._waiters >= count, timeout)

    # -- the asynchronous face -----------------------------------------------------------------

    def call_at(self, t_ms: float, callback: Callable[..., Any], *args: Any) -> _ManualHandle:
        handle = _ManualHandle()
        with self._cond:
            due_now = t_ms <= self._now
            if not due_now:
                heapq.heappush(self._heap, (t_ms, next(self._seq), handle, callback, args))
        if due_now:
            asyncio.get_running_loop().call_soon(self._run, handle, callback, args)
        elif self._changed is not None:
            self._changed.set()
        return handle

    @staticmethod
    def _run(handle: _ManualHandle, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if not handle.cancelled:
            callback(*args)

    async def sleep_until(self, t_ms: float) -> None:
        if t_ms <= self.now_ms():
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        handle = self.call_at(t_ms, _wake, fut)
        try:
            await fut
        finally:
            handle.cancel()

    async def sleep(self, ms: float) -> None:
        await self.sleep_until(self.now_ms() + ms)

    def pending(self) -> int:
        """Callbacks scheduled in the future and not cancelled."""
        with self._cond:
            return sum(1 for entry in self._heap if not entry[2].cancelled)

    def next_due(self) -> float | None:
        with self._cond:
            live = [entry[0] for entry in self._heap if not entry[2].cancelled]
        return min(live) if live else None

    async def wait_for_sleepers(self, count: int = 1, timeout: float = 5.0) -> None:
        """Return once at least ``count`` callbacks wait on this clock (a task parked on it)."""

        async def wait() -> None:
            while self.pending() < count:
                self._changed = asyncio.Event()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)
