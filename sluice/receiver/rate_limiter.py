"""Token-bucket rate limiter with Guava ``SmoothBursty`` semantics, as Spark's receivers use it.

Spark's ``org.apache.spark.streaming.receiver.RateLimiter`` wraps Guava's
``RateLimiter.create(rate)``: at most one second of unused permits is stored, an acquire never
refuses (a large acquire is paid for by the wait of the *next* caller), and ``updateRate`` ignores
rates <= 0 and caps at ``spark.streaming.receiver.maxRate``.

The arithmetic lives in :class:`SmoothBursty` (no I/O, no asyncio: property-testable, and one
acquire of any size is a handful of float operations, so acquiring a batch of records costs a few
nanoseconds per record).  :class:`RateLimiter` is the async shell that parks callers on a
:class:`~sluice.clock.Clock`.

Two deliberate departures from Guava, both so a rate change acts at once (the estimator's new
rate must bite within one block interval):

* a waiting caller reserves its permits only when its turn comes, so its permits are priced at the
  rate in force then, not when it started waiting;
* when the rate rises, permits granted but not yet paid for (the debt that makes the next caller
  wait) are re-priced at the new rate, so a wait already in progress shortens at once.  When it
  falls, that debt keeps its old price, as in Guava: those records were admitted under the old
  rate, and re-pricing them would charge the next batches for them a second time (after a drop
  from 15,000/s to 100/s, half a second of old permits would cost 75 s of silence: empty batches
  that feed the estimator nothing).  The new rate applies from the next permit granted.

And one for CPU: a caller parks for at least ``min_wait_ms`` (20 ms; timer slack).  What it
oversleeps comes back as stored permits, so the average rate is exact while a high rate costs one
event-loop wake-up per 20 ms instead of one per acquire (a receiver's blocks span 200 ms anyway).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sluice.clock import Clock, SystemClock
from sluice.errors import InvalidArgument


class SmoothBursty:
    """Guava's SmoothBursty state machine in milliseconds (pure; the caller supplies ``now``)."""

    # plain slots, not properties: the limiter's fast path reads next_free_ms / interval_ms directly
    __slots__ = ("interval_ms", "_max_permits", "_stored", "next_free_ms", "_rate", "max_burst_seconds")

    def __init__(self, rate: float, now_ms: float, max_burst_seconds: float = 1.0) -> None:
        self.max_burst_seconds = max_burst_seconds
        self.interval_ms = 0.0  # ms per permit; 0 when unlimited
        # next_free_ms: when the next reservation can be granted without waiting
        self._max_permits = 0.0
        self._stored = 0.0
        self.next_free_ms = float(now_ms)
        self._rate = 0.0
        self.set_rate(rate, now_ms)

    @property
    def rate(self) -> float:
        return self._rate

    @property
    def stored_permits(self) -> float:
        return self._stored

    def _resync(self, now_ms: float) -> None:
        """Credit the permits earned while nobody asked (capped at one burst), as Guava's resync."""
        if now_ms > self.next_free_ms:
            if self.interval_ms > 0.0:
                earned = (now_ms - self.next_free_ms) / self.interval_ms
                self._stored = min(self._max_permits, self._stored + earned)
            self.next_free_ms = now_ms

    def reserve(self, permits: float, now_ms: float) -> float:
        """Take ``permits`` now; return the time the caller may proceed (Guava's returned moment).

        Stored permits are free; the rest push ``next_free`` forward, so the *following* caller pays.
        """
        self._resync(now_ms)
        ready = self.next_free_ms
        spend = permits if permits < self._stored else self._stored
        self.next_free_ms += (permits - spend) * self.interval_ms
        self._stored -= spend
        return ready

    def can_acquire(self, now_ms: float) -> bool:
        return self.next_free_ms <= now_ms

    def set_rate(self, rate: float, now_ms: float) -> None:
        if not rate > 0:
            raise InvalidArgument(f"rate must be above 0 (math.inf for unlimited), got {rate!r}")
        self._resync(now_ms)
        old_interval = self.interval_ms
        new_interval = 0.0 if math.isinf(rate) else 1000.0 / rate
        if self.next_free_ms > now_ms and new_interval < old_interval:
            owed_permits = (self.next_free_ms - now_ms) / old_interval
            self.next_free_ms = now_ms + owed_permits * new_interval
        self.interval_ms = new_interval
        self._rate = float(rate)
        old_max = self._max_permits
        self._max_permits = self.max_burst_seconds * rate
        if math.isinf(old_max):
            self._stored = self._max_permits if not math.isinf(self._max_permits) else 0.0
        elif old_max == 0.0 or math.isinf(self._max_permits):
            self._stored = 0.0
        else:
            self._stored = self._stored * self._max_permits / old_max


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class RateLimiter:
    """``await acquire(n)`` admits ``n`` records at the current rate; ``set_rate`` changes it live.

    ``rate`` / ``max_rate`` of ``None`` or <= 0 mean "none" (Spark's ``maxRate`` default is
    ``Long.MaxValue``).  The initial rate is ``min(rate, max_rate)``, as Spark's
    ``min(initialRate, maxRateLimit)``; with neither the limiter is unlimited (``rate == math.inf``).

    :param rate: the initial rate in permits (records) per second; ``None`` or <= 0: none.
    :param max_rate: a cap no later rate exceeds (``receiver.max_rate``); ``None`` or <= 0: none.
    :param clock: what "now" and sleeping mean (a ``ManualClock`` in tests).
    :param min_wait_ms: a caller that must wait parks at least this long; what it oversleeps comes
        back as stored permits, so the next acquires pass without a timer each.
    """

    def __init__(
        self,
        rate: float | None = None,
        max_rate: float | None = None,
        clock: Clock | None = None,
        min_wait_ms: float = 20.0,
    ) -> None:
        self._clock: Clock = clock or SystemClock()
        self.min_wait_ms = min_wait_ms
        self.max_rate: float | None = max_rate if max_rate is not None and max_rate > 0 else None
        initial = rate if rate is not None and rate > 0 else None
        if initial is None:
            initial = self.max_rate if self.max_rate is not None else math.inf
        elif self.max_rate is not None:
            initial = min(initial, self.max_rate)
        self._core = SmoothBursty(initial, self._clock.now_ms())
        self._now_ms = self._clock.now_ms
        self._waiters: set[asyncio.Future] = set()
        self.wait_seconds_total = 0.0  # time callers spent parked here (exported as a metric)

    @property
    def rate(self) -> float:
        return self._core.rate

    @property
    def clock(self) -> Clock:
        return self._clock

    def set_rate(self, new_rate: float | None) -> None:
        """Spark's ``updateRate``: ignore <= 0 (and NaN/None), cap at ``max_rate``; acts at once."""
        if new_rate is None or not new_rate > 0:
            return
        capped = min(new_rate, self.max_rate) if self.max_rate is not None else new_rate
        self._core.set_rate(capped, self._clock.now_ms())
        for fut in list(self._waiters):  # parked callers re-plan against the new rate
            _wake(fut)

    def try_acquire(self, permits: float = 1) -> bool:
        """Take ``permits`` if that needs no wait now (Guava ``tryAcquire(permits, 0)``)."""
        if permits < 0:
            raise InvalidArgument(f"permits must be >= 0, got {permits}")
        now = self._clock.now_ms()
        if not self._core.can_acquire(now):
            return False
        self._core.reserve(permits, now)
        return True

    async def acquire(self, permits: float = 1) -> float:
        """Wait until ``permits`` may pass; return the seconds waited. Never refuses."""
        if permits < 0:
            raise InvalidArgument(f"permits must be >= 0, got {permits}")
        core = self._core
        if core.interval_ms == 0.0:  # unlimited: nothing to account for
            return 0.0
        now = self._now_ms()
        if core.next_free_ms <= now:  # fast path: pure arithmetic, no allocation
            core.reserve(permits, now)
            return 0.0
        return await self._wait_then_reserve(permits, now)

    async def _wait_then_reserve(self, permits: float, start: float) -> float:
        loop = asyncio.get_running_loop()
        while True:
            fut = loop.create_future()
            # Timer slack: never park for less than min_wait_ms.  Oversleeping is credited back as
            # stored permits (Guava's resync), so the average rate is unchanged, but the next few
            # acquires pass on the fast path instead of each costing an event-loop wake-up.
            wake_at = max(self._core.next_free_ms, self._clock.now_ms() + self.min_wait_ms)
            handle = self._clock.call_at(wake_at, _wake, fut)
            self._waiters.add(fut)
            try:
                await fut
            finally:
                handle.cancel()
                self._waiters.discard(fut)
            now = self._clock.now_ms()
            if self._core.can_acquire(now):
                self._core.reserve(permits, now)
                waited = max(0.0, now - start) / 1000.0
                self.wait_seconds_total += waited
                return waited


def limiter_pieces(messages: Sequence[Any], size: Callable[[], int]) -> Iterator[tuple[Sequence[Any], tuple[int, int]]]:
    """Cut one partition's fetched records into pieces of at most ``size()`` records, each with
    its own ``(from_offset, until_offset)``.

    Each piece is acquired from the limiter and stored on its own, with its own offset range, so
    a fetch of thousands of records at a low rate still feeds every block (see
    ``Receiver.piece_size``) and each block still names exactly the offsets it holds.  ``size`` is
    asked again for every piece: a rate that changed while a piece waited applies to the next.
    """
    start = 0
    while start < len(messages):
        piece = messages[start : start + max(1, size())]
        start += len(piece)
        yield piece, (piece[0].offset, piece[-1].offset + 1)
