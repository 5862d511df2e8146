"""When batches start: pure trigger policies, driven by the job generator's clock.

* ``fixed`` (DStream's ``RecurringTimer``): a batch every interval whatever happens.  A slow batch
  does not delay the next tick; the new batch waits in the job queue and its scheduling delay grows.
* ``processing-time`` (Structured Streaming's ``ProcessingTimeExecutor``): the next trigger time is
  computed *before* the batch runs (``next_batch_time(trigger)``); after the batch the loop waits
  until then, which returns at once when the batch overran, and an overrun (``elapsed > interval``)
  is reported as falling behind (Spark 3.x; Spark 2.1 computed it from the batch's end, so an
  overrun also waited for the following boundary).
* ``once``: one batch of what is available, then stop.
* ``available-now``: batches paced as ``processing-time`` until the source has nothing more
  available, then stop.

Policies only compute times; the job generator owns the waiting, so the same objects serve the
real timer and the manual-clock tests.  :func:`simulate` plays a policy against given batch
durations without threads.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from sluice.config import Trigger
from sluice.errors import InvalidArgument

TRIGGERS = tuple(t.value for t in Trigger)


def next_batch_time(now_ms: int, interval_ms: int) -> int:
    """The next interval boundary strictly after ``now_ms`` (``now`` itself when the interval is 0)."""
    if interval_ms < 0:
        raise InvalidArgument(f"trigger interval must be >= 0 ms, got {interval_ms}")
    if interval_ms == 0:
        return now_ms
    return now_ms // interval_ms * interval_ms + interval_ms


class TriggerPolicy:
    """Base policy; subclasses set ``name`` (a :class:`~sluice.config.Trigger`) and ``waits_for_batch``
    and may override the hooks.

    :param interval_ms: the batch interval; 0 is allowed only where a policy never repeats on a timer.

    ``waits_for_batch`` is False only for ``fixed``: its timer ticks regardless of running batches.
    For the others the generator runs one batch at a time and asks for the next trigger after the
    batch completed.
    """

    name: Trigger
    waits_for_batch = True

    def __init__(self, interval_ms: int) -> None:
        if interval_ms < 0 or (interval_ms == 0 and not self.waits_for_batch):
            raise InvalidArgument(f"trigger '{self.name}': batch interval must be > 0 ms, got {interval_ms}")
        self.interval_ms = interval_ms

    def first_trigger(self, now_ms: int, last_batch_ms: int | None = None) -> int:
        """Time of the first batch, the driver having started at ``now_ms``; ``last_batch_ms``:
        the latest batch time of an earlier run of the stream (``None``: the stream's first run)."""
        return now_ms

    def next_trigger(self, trigger_ms: int, now_ms: int, more_available: bool = True) -> int | None:
        """Time of the batch after the one triggered at ``trigger_ms``; None stops the stream.

        For waiting policies ``now_ms`` is when that batch ended; for ``fixed`` it is the tick.
        """
        return max(next_batch_time(trigger_ms, self.interval_ms), now_ms)

    def falling_behind(self, trigger_ms: int, end_ms: int) -> int | None:
        """The elapsed time when a batch overran its interval (warn and count), else None."""
        elapsed = end_ms - trigger_ms
        if self.interval_ms > 0 and elapsed > self.interval_ms:
            return elapsed
        return None


class FixedIntervalTrigger(TriggerPolicy):
    """DStream semantics: ticks on every boundary, batches queue behind slow ones."""

    name = Trigger.FIXED
    waits_for_batch = False

    def first_trigger(self, now_ms: int, last_batch_ms: int | None = None) -> int:
        passed = now_ms // self.interval_ms * self.interval_ms
        if last_batch_ms is not None and passed > last_batch_ms:
            # A restart: the boundary that passed while no driver ran is generated at once, as
            # Spark's JobGenerator.restart generates its down-time batches, so what arrived
            # meanwhile does not wait another interval.  One batch, not one per missed boundary:
            # an allocation takes every queued block its bound allows, so the others would be empty.
            return passed
        # RecurringTimer.getStartTime: the first boundary strictly after now.
        return next_batch_time(now_ms, self.interval_ms)

    def next_trigger(self, trigger_ms: int, now_ms: int, more_available: bool = True) -> int | None:
        return trigger_ms + self.interval_ms

    def falling_behind(self, trigger_ms: int, end_ms: int) -> int | None:
        # Under `fixed` an overrun shows as scheduling delay of the queued batches, not as a warning.
        return None


class ProcessingTimeTrigger(TriggerPolicy):
    """Structured Streaming semantics: next boundary, or at once after an overrun."""

    name = Trigger.PROCESSING_TIME


class OnceTrigger(TriggerPolicy):
    """One batch now, then stop."""

    name = Trigger.ONCE

    def next_trigger(self, trigger_ms: int, now_ms: int, more_available: bool = True) -> int | None:
        return None


class AvailableNowTrigger(TriggerPolicy):
    """Paced like processing-time while the source reports more input; stops when it has none."""

    name = Trigger.AVAILABLE_NOW

    def next_trigger(self, trigger_ms: int, now_ms: int, more_available: bool = True) -> int | None:
        if not more_available:
            return None
        return super().next_trigger(trigger_ms, now_ms, more_available)


_POLICIES: dict[str, type[TriggerPolicy]] = {
    cls.name.value: cls for cls in (FixedIntervalTrigger, ProcessingTimeTrigger, OnceTrigger, AvailableNowTrigger)
}


def create(name: str, interval_ms: int) -> TriggerPolicy:
    """The policy called ``name`` (one of :data:`TRIGGERS`)."""
    try:
        cls = _POLICIES[name]
    except KeyError:
        raise InvalidArgument(f"unknown trigger {name!r}: use one of {', '.join(TRIGGERS)}") from None
    return cls(interval_ms)


@dataclass(frozen=True)
class SimulatedBatch:
    """One batch of a :func:`simulate` run: when it was triggered, started and ended."""

    trigger_ms: int
    start_ms: int
    end_ms: int
    falling_behind_ms: int | None = None

    @property
    def scheduling_delay_ms(self) -> int:
        return self.start_ms - self.trigger_ms


def simulate(
    policy: TriggerPolicy,
    start_ms: int,
    durations: Sequence[int],
    concurrent_jobs: int = 1,
    more_available: Sequence[bool] | None = None,
) -> list[SimulatedBatch]:
    """Play ``policy`` against batch ``durations`` on a manual timeline (no threads, no sleeping).

    ``more_available[i]`` is what the source answers after batch ``i`` (default: always True).
    Under ``fixed`` up to ``concurrent_jobs`` batches run at once, the rest queue in order.
    """
    batches: list[SimulatedBatch] = []
    trigger: int | None = policy.first_trigger(start_ms)
    free_at = [start_ms] * max(1, concurrent_jobs)  # when each job thread is free next
    heapq.heapify(free_at)
    for i, duration in enumerate(durations):
        if trigger is None:
            break
        start = max(trigger, heapq.heappop(free_at))
        end = start + duration
        heapq.heappush(free_at, end)
        batches.append(SimulatedBatch(trigger, start, end, policy.falling_behind(trigger, end)))
        available = True if more_available is None else more_available[i]
        if policy.waits_for_batch:
            trigger = policy.next_trigger(trigger, end, available)
        else:
            trigger = policy.next_trigger(trigger, trigger, available)
    return batches
