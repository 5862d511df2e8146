"""The figures that judge an estimator, computed from a ``Trace`` and nothing else.

Definitions (why each is what it is):

* **in band**: a batch whose processing time is within 10 % of the interval (it used the
  interval, neither wasting it nor overrunning) and whose scheduling delay is under one
  interval (no queue to speak of).  A batch that took *everything* upstream offered and still
  finished in time also counts: an estimator cannot be blamed for a source that ran dry.
* **batches_to_steady**: batches from the reference batch (the first batch that starts at or
  after the last capacity step; batch 1 when capacity does not step) to the first batch after
  which every batch is in band, to the end of the run.  ``None`` when that never happens.
* **peak_scheduling_delay_intervals**: the largest scheduling delay, in intervals, over the run;
  ``peak_delay_after_change_intervals`` the same from the first capacity step on.
* **batches_at_min_rate**: batches whose receivers ran at the scenario's minimum rate (Spark's
  ``pid.minRate``, 100/s) or below, mid-interval.
* **steady_utilization**: records processed over records that *could* have been processed
  (``min(capacity, what was available)`` per batch), over the steady window (from steady on;
  the last half of the run when never steady).  Records beyond capacity do not count: they
  are queue, not throughput, so an overloaded estimator cannot score above 1.
* **overshoot**: how far the estimator's own rates pushed a batch past capacity, as a fraction
  (0.0 = never); batches filled at the initial rate do not count against the estimator.
* **overloaded_batches**: batches holding more than 110 % of capacity (the issue's "nine
  overloaded batches" for Spark), whoever set their rate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sluice.testing.arena.sim import BatchTrace, Trace

__all__ = ["Metrics", "measure", "in_band", "verdict", "BAND", "TIES"]

BAND = 0.10

#: The figures an estimator is judged on, and the difference of two medians that is a tie, not a
#: result: a tenth of an interval of scheduling delay (half a 200 ms block of a 1 s batch: the
#: granularity of admission), one and a half points of utilisation (under the 2 % noise on
#: processing time); whole batches count exactly.
TIES: dict[str, float] = {
    "batches_to_steady": 0.0,
    "peak_scheduling_delay_intervals": 0.1,
    "batches_at_min_rate": 0.0,
    "steady_utilization": 0.015,
}


@dataclass(frozen=True)
class Metrics:
    scenario: str
    estimator: str
    batches_to_steady: int | None
    peak_scheduling_delay_intervals: float
    peak_delay_after_change_intervals: float | None
    batches_at_min_rate: int
    steady_utilization: float
    overshoot: float
    overloaded_batches: int
    batches: int
    estimator_errors: int

    def as_dict(self) -> dict:
        return asdict(self)


def verdict(ours: dict, peer: dict) -> dict[str, str]:
    """Per judged figure, ``win``, ``tie`` or ``loss`` of our median against the peer's (lower is
    better except utilisation; ``None``, never steady, is worse than any number of batches)."""
    out = {}
    for name, tie in TIES.items():
        a, b = ours.get(name), peer.get(name)
        a = float("inf") if a is None else float(a)
        b = float("inf") if b is None else float(b)
        if name == "steady_utilization":
            a, b = -a, -b
        out[name] = "tie" if a == b or abs(a - b) <= tie else ("win" if a < b else "loss")
    return out


def in_band(batch: BatchTrace, interval_ms: float) -> bool:
    """Steady for one batch: interval used within 10 %, and no queue (see module docstring)."""
    if batch.scheduling_ms >= interval_ms:
        return False
    if abs(batch.processing_ms - interval_ms) <= BAND * interval_ms:
        return True
    drained = batch.records >= batch.available_records - 1
    return drained and batch.processing_ms <= (1 + BAND) * interval_ms


def _reference_index(trace: Trace, change_times_s: tuple[float, ...]) -> int:
    """Position of the first batch starting at or after the last capacity step (0 if none)."""
    if not change_times_s:
        return 0
    last = max(change_times_s) * 1000
    for i, batch in enumerate(trace.batches):
        if batch.start_ms >= last:
            return i
    return len(trace.batches)


def _steady_start(trace: Trace) -> int | None:
    """Position of the first batch from which every batch is in band; None if the last is not."""
    interval = trace.batch_interval_ms
    start = None
    for i in range(len(trace.batches) - 1, -1, -1):
        if not in_band(trace.batches[i], interval):
            break
        start = i
    return start


def measure(trace: Trace, *, change_times_s: tuple[float, ...] = (), min_rate: float = 100.0) -> Metrics:
    """All figures for one scenario x estimator run."""
    batches = trace.batches
    interval = float(trace.batch_interval_ms)
    reference = _reference_index(trace, change_times_s)
    steady = _steady_start(trace)
    if steady is not None and steady < reference:
        steady = reference
    to_steady = None if steady is None else steady - reference
    window = batches[steady:] if steady is not None else batches[len(batches) // 2 :]
    possible = [min(b.capacity_records, b.available_records) for b in window]
    useful = sum(min(b.records, cap) for b, cap in zip(window, possible))
    utilization = useful / sum(possible) if sum(possible) > 0 else 0.0
    peak = max((b.scheduling_ms for b in batches), default=0.0) / interval
    after = None
    if change_times_s:
        first = min(change_times_s) * 1000
        after = max((b.scheduling_ms for b in batches if b.batch_time_ms >= first), default=0.0) / interval
    at_min = sum(1 for b in batches if b.rate_limit is not None and b.rate_limit <= min_rate + 0.5)
    overshoot = max(
        (b.records / b.capacity_records - 1.0 for b in batches if b.from_estimator and b.capacity_records > 0),
        default=0.0,
    )
    overloaded = sum(1 for b in batches if b.records > (1 + BAND) * b.capacity_records)
    return Metrics(
        scenario=trace.scenario,
        estimator=trace.estimator,
        batches_to_steady=to_steady,
        peak_scheduling_delay_intervals=round(peak, 3),
        peak_delay_after_change_intervals=None if after is None else round(after, 3),
        batches_at_min_rate=at_min,
        steady_utilization=round(utilization, 4),
        overshoot=round(max(0.0, overshoot), 4),
        overloaded_batches=overloaded,
        batches=len(batches),
        estimator_errors=trace.errors,
    )
