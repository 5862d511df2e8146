"""The source's own clock on its batches, so that a batch that overran bounds the very next one.

A query's progress reaches a ``StreamingQueryListener`` on an asynchronous bus: when batch N
overruns its trigger, batch N + 1 starts at once and its offsets are fixed before N's progress
arrives, so a rate learnt from N's progress bounds N + 2 at the earliest.  The source sees its own
calls, in this order (Spark's ``MicroBatchExecution``, one batch at a time): ``latestOffset`` for
N + 1 only after batch N has finished, then ``commit`` of N's end, then ``partitions`` of N + 1.
So the time from ``partitions`` of N to ``latestOffset`` of N + 1 is N's run plus the engine's
bookkeeping: an upper bound of N's processing time.  When it exceeds the trigger interval, the
batch overran, and the records it carried scaled to one interval are what the query showed it can
process in one: the next batch takes no more.  A batch that finished early tells nothing here
(the engine waited for the next trigger before asking), so growth stays with the estimator fed by
the listener.  A query's first batch, slow with the engine's warm-up, can cut the second once, as
the in-flight cut of receiver mode does after a slow first batch.  The cut does not feed on itself:
the batch it bounded is not timed.  A batch's time is not its records' alone: each micro-batch is
at least one Spark job, about a second of the engine's own work on a loaded machine whether it
carries 40 records or 1,000.  Timed, a cut batch would overrun again and be cut again by the same
ratio, down to a record or two a batch, each still taking that second (a ``sluice-kafka`` query
went 1,000, 76, 52, 40 records a batch so).  By the batch
after a cut the listener has had the overrun batch's progress, so a lasting slowdown is the
estimator's to answer.  Under ``Trigger.AvailableNow``
there is no interval to keep to, so nothing is timed: its batches are bounded by
``maxOffsetsPerTrigger`` alone, as Spark's Kafka source bounds them.  Pure, on an injected clock.
"""

from __future__ import annotations

import logging

from sluice.clock import Clock, SystemClock

log = logging.getLogger(__name__)


class BatchTimer:
    """Times the source's batches from its own ``partitions`` and ``latestOffset`` calls."""

    def __init__(self, trigger_interval_ms: int, clock: Clock | None = None) -> None:
        self.trigger_interval_ms = trigger_interval_ms
        self.clock = clock or SystemClock()
        self._planned: tuple[float, int] | None = None  # (when, records) of the batch last planned
        self._untimed = False  # Trigger.AvailableNow: no interval, so no overrun
        self._cut = False  # the last answer was a bound: the batch planned next is not timed

    def available_now(self) -> None:
        """The query runs under ``Trigger.AvailableNow``: from now on no batch bounds the next."""
        self._untimed = True

    def planned(self, records: int) -> None:
        """``partitions`` was called for a batch of ``records``: it starts now (untimed if the last
        answer cut it)."""
        self._planned = None if self._cut else (self.clock.now_ms(), records)
        self._cut = False

    def overrun_bound(self) -> int | None:
        """At ``latestOffset``: the most records the next batch takes because the last one overran
        its interval, or None.  Each planned batch answers once (a later call, as when no new data
        made Spark skip a trigger, is not timed from it), and a batch planned after a bound is not
        timed at all (the module doc)."""
        planned, self._planned = self._planned, None
        self._cut = False
        if planned is None or self._untimed:
            return None
        started_ms, records = planned
        elapsed_ms = self.clock.now_ms() - started_ms
        if records <= 0 or elapsed_ms <= self.trigger_interval_ms:
            return None
        bound = max(1, int(records * self.trigger_interval_ms / elapsed_ms))
        self._cut = True
        log.info(
            "the last batch took %.0f ms for a %d ms trigger: the next takes at most %d records (it carried %d)",
            elapsed_ms,
            self.trigger_interval_ms,
            bound,
            records,
        )
        return bound
