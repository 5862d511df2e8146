"""Spark's ``RecurringTimer`` on asyncio: callbacks at exact multiples of a period.

Callbacks receive the *scheduled* time, so block (and batch) times are exact multiples of the
interval whatever the loop's latency.  After :meth:`RecurringTimer.stop` the timer still runs
the callback of the first scheduled time at or after the stop request (Spark's guarantee that the
block generator's last partial buffer becomes a block; Spark waits one further full period).
A callback that takes longer than a period delays the next ones, which then run back to back until
the timer has caught up (Spark's behaviour too).

Beyond Spark, a timer may run each callback ``lead_ms`` before its time (the time it is given is
still the multiple): the block generator cuts the block of an interval that ends on a batch boundary
a little early, so its report reaches the tracker before the driver's allocation for that boundary
(see :class:`~sluice.receiver.block_generator.BlockGenerator`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

from sluice.clock import Clock
from sluice.errors import InvalidArgument, InvalidState

log = logging.getLogger(__name__)


class RecurringTimer:
    """Calls ``await callback(time)`` at every multiple of ``period_ms`` on the clock until stopped.

    :param clock: what "now" and sleeping mean (a ``ManualClock`` in tests).
    :param period_ms: the period; the first call is at the first multiple after :meth:`start`.
    :param callback: a coroutine function given the scheduled time (not the time it runs).
    :param name: names the timer in errors and its task.
    :param lead_ms: run each callback this long before its time, ``0 <= lead_ms < period_ms``.
    """

    def __init__(
        self,
        clock: Clock,
        period_ms: float,
        callback: Callable[[float], Awaitable[None]],
        name: str,
        lead_ms: float = 0.0,
    ) -> None:
        if not period_ms > 0:
            raise InvalidArgument(f"{name}: timer period must be above 0 ms, got {period_ms}")
        if not 0 <= lead_ms < period_ms:
            raise InvalidArgument(
                f"{name}: timer lead must be at least 0 ms and below the period {period_ms:g} ms, got {lead_ms}"
            )
        self._clock = clock
        self.period_ms = period_ms
        self.lead_ms = lead_ms
        self._callback = callback
        self.name = name
        self._task: asyncio.Task | None = None
        self._stopped = False
        self._stop_requested_at = math.inf
        self.next_time: float = math.nan
        self.prev_time: float = math.nan

    def get_start_time(self) -> float:
        """The first multiple of the period whose callback runs strictly after now."""
        now = self._clock.now_ms() + self.lead_ms
        return (math.floor(now / self.period_ms) + 1) * self.period_ms

    def get_restart_time(self, original_start: float) -> float:
        now = self._clock.now_ms()
        return (math.floor((now - original_start) / self.period_ms) + 1) * self.period_ms + original_start

    def start(self, start_time: float | None = None) -> float:
        if self._task is not None:
            raise InvalidState(f"timer {self.name} already started")
        self.next_time = self.get_start_time() if start_time is None else start_time
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"RecurringTimer - {self.name}")
        return self.next_time

    async def _tick(self) -> None:
        await self._clock.sleep_until(self.next_time - self.lead_ms)
        await self._callback(self.next_time)
        self.prev_time = self.next_time
        self.next_time += self.period_ms

    async def _loop(self) -> None:
        # Spark runs one more full wait + callback after stop(); a tick scheduled at or after the
        # stop request already covers everything added before it, so that one is enough.
        while True:
            await self._tick()
            if self._stopped and self.prev_time - self.lead_ms >= self._stop_requested_at:
                return

    async def stop(self) -> float:
        """Stop after one more callback; return the time of the last callback. Idempotent."""
        if self._task is None:
            return self.prev_time
        if not self._stopped:
            self._stopped = True
            self._stop_requested_at = self._clock.now_ms()
        await asyncio.shield(self._task)
        return self.prev_time

    def cancel(self) -> None:
        """Abandon the timer without the last callback (a process being torn down)."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()
