"""The tracker's refusals of a peer's request by policy, and its per-receiver log budget.

A refusal here is not a bad frame: the request was well formed, but the peer may not do it
(:class:`Forbidden`), a stated bound on the tracker's state is reached (:class:`LimitReached`), or
a stream's queue is full and the receiver must wait and retry (:class:`Busy`).  Each maps to its
own error code, so a client knows whether to stop, fail or wait.  Pure: no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sluice.block_info import InvalidMessage


class Forbidden(InvalidMessage):
    """The connection's credential does not allow this request (its streams, its receiver ids)."""


class LimitReached(InvalidMessage):
    """A stated bound on the tracker's state (a ``tracker.max_*`` key) refuses the request."""


class Busy(InvalidMessage):
    """The stream's queue is at its bound: retry once the driver has taken blocks."""


class ErrorReports:
    """A token bucket per receiver: ``report_error`` lines logged at most ``per_minute`` a minute
    each (bursts up to that many); the rest are counted only.  The buckets of receivers gone are
    dropped by :meth:`forget`, so the map stays as large as the registry.

    :param per_minute: the lines each receiver may have logged per minute.
    :param clock: seconds, monotonic (injectable for tests).
    """

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # receiver id -> (tokens, at)

    def allow(self, receiver_id: str) -> bool:
        now = self.clock()
        tokens, at = self._buckets.get(receiver_id, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - at) * self.per_minute / 60.0)
        allowed = tokens >= 1.0
        self._buckets[receiver_id] = (tokens - 1.0 if allowed else tokens, now)
        return allowed

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop the buckets of receivers ``keep`` rejects."""
        for receiver_id in [r for r in self._buckets if not keep(r)]:
            del self._buckets[receiver_id]
