"""Clocks with asynchronous waiting, so time-driven parts can be tested without sleeping.

Spark injects a ``Clock`` (``SystemClock`` or ``ManualClock``) into its rate limiter, block
generator and job generator; tests advance a manual clock and the timers fire deterministically.
Sluice does the same on asyncio: every waiting primitive goes through :meth:`Clock.call_at`, and
:class:`ManualClock` runs those callbacks only when a test calls :meth:`ManualClock.advance`.

Times are milliseconds (float or int) in the clock's own epoch.  ``SystemClock`` reports wall-clock
milliseconds (block and batch names are wall times, as in Spark), but advances monotonically so a
wall-clock step cannot stall a limiter or a timer.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Any, Callable, Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the limiter, the block timer and the driver's job timer need from time."""

    def now_ms(self) -> float: ...

    def call_at(self, t_ms: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Run ``callback(*args)`` on the event loop once the clock reaches ``t_ms``."""
        ...

    async def sleep_until(self, t_ms: float) -> None: ...

    async def sleep(self, ms: float) -> None: ...


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class SystemClock:
    """Wall-clock milliseconds that never go backwards (anchored to ``time.time`` once)."""

    def __init__(self) -> None:
        self._wall0 = time.time() * 1000.0
        self._mono0 = time.monotonic() * 1000.0

    def now_ms(self) -> float:
        return self._wall0 + (time.monotonic() * 1000.0 - self._mono0)

    def call_at(self, t_ms: float, callback: Callable[..., Any], *args: Any) -> asyncio.TimerHandle:
        loop = asyncio.get_running_loop()
        delay = max(0.0, (t_ms - self.now_ms()) / 1000.0)
        return loop.call_later(delay, callback, *args)

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
    """A clock that moves only when told; callbacks due run inside :meth:`advance`.

    Coroutines woken by ``advance`` resume when the test next yields to the loop; a test that needs
    to know a task is parked on the clock awaits :meth:`wait_for_sleepers` first, so no test has to
    guess with real sleeps.
    """

    def __init__(self, start_ms: float = 0) -> None:
        self._now = start_ms
        self._heap: list[tuple[float, int, _ManualHandle, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._changed: asyncio.Event | None = None

    def now_ms(self) -> float:
        return self._now

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def call_at(self, t_ms: float, callback: Callable[..., Any], *args: Any) -> _ManualHandle:
        handle = _ManualHandle()
        if t_ms <= self._now:
            asyncio.get_running_loop().call_soon(self._run, handle, callback, args)
        else:
            heapq.heappush(self._heap, (t_ms, next(self._seq), handle, callback, args))
            self._notify()
        return handle

    @staticmethod
    def _run(handle: _ManualHandle, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if not handle.cancelled:
            callback(*args)

    async def sleep_until(self, t_ms: float) -> None:
        if t_ms <= self._now:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        handle = self.call_at(t_ms, _wake, fut)
        try:
            await fut
        finally:
            handle.cancel()

    async def sleep(self, ms: float) -> None:
        await self.sleep_until(self._now + ms)

    def advance(self, ms: float) -> None:
        """Move time forward by ``ms`` and run every callback that has come due, in time order."""
        self.set_time(self._now + ms)

    def set_time(self, t_ms: float) -> None:
        if t_ms < self._now:
            raise ValueError(f"ManualClock cannot go back from {self._now} to {t_ms}")
        while self._heap and self._heap[0][0] <= t_ms:
            due, _, handle, callback, args = heapq.heappop(self._heap)
            self._now = max(self._now, due)
            self._run(handle, callback, args)
        self._now = t_ms

    def pending(self) -> int:
        """Callbacks scheduled in the future and not cancelled."""
        return sum(1 for entry in self._heap if not entry[2].cancelled)

    def next_due(self) -> float | None:
        live = [entry[0] for entry in self._heap if not entry[2].cancelled]
        return min(live) if live else None

    async def wait_for_sleepers(self, count: int = 1, timeout: float = 5.0) -> None:
        """Return once at least ``count`` callbacks wait on this clock (a task parked on it)."""

        async def wait() -> None:
            while self.pending() < count:
                self._changed = asyncio.Event()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)
