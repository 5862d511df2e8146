"""Holding the arena against a real run (issue 8, item 2): fit the model, replay, compare.

The arena is only worth its verdicts if its model behaves like the real pipeline.  A real
run's per-batch trace (records, processing ms, scheduling ms, the rate in force) is all this
needs: ``fit_cost_model`` fits ``processing = overhead + cost x records`` to it by least squares
(the residual spread becomes the model's noise), ``calibrate`` replays the same estimator on
that model with the run's interval, initial rate and offered load, and reports how far the
simulated rate-per-batch curve strays from the real one.  A calibration test feeds it a trace
recorded by the driver's end-to-end backpressure setup and asserts the band.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Sequence

from estimators.arena.model import Constant, CostModel, Source
from estimators.arena.sim import SimConfig, Trace, simulate

__all__ = ["RealBatch", "Calibration", "fit_cost_model", "calibrate", "rate_deviation", "trace_to_real"]


class RealBatch(NamedTuple):
    """One batch of a real run, as the driver's BatchInfo and the published rate give it."""

    records: int
    processing_ms: float
    scheduling_ms: float
    rate: float | None   # receiver rate limit in force while the batch was filled (None: none)


@dataclass(frozen=True)
class Calibration:
    model: CostModel
    simulated: Trace
    real_rates: list[float | None]
    simulated_rates: list[float | None]
    max_relative_deviation: float     # over batches where both have a rate
    within_band: float                # share of those batches within ``band``
    band: float
    notes: list[str] = field(default_factory=list)


def fit_cost_model(batches: Sequence[RealBatch], *, skip_first: bool = True) -> CostModel:
    """Least-squares ``overhead + cost x records`` over the non-empty batches.

    The first batch is skipped by default: it pays the start-up (executors, Python workers)
    that no later batch pays; its excess is kept as ``first_batch_extra_ms``.  Falls back to
    zero overhead (time proportional to records) when the batch sizes never varied.
    """
    rows = [b for b in batches if b.records > 0 and b.processing_ms > 0]
    fit_rows = rows[1:] if skip_first and len(rows) > 2 else rows
    if not fit_rows:
        raise ValueError("calibration: the trace has no batch with records and a processing time")
    n = [float(b.records) for b in fit_rows]
    p = [float(b.processing_ms) for b in fit_rows]
    mean_n, mean_p = sum(n) / len(n), sum(p) / len(p)
    var_n = sum((x - mean_n) ** 2 for x in n)
    if var_n > 0:
        cost = sum((x - mean_n) * (y - mean_p) for x, y in zip(n, p)) / var_n
        overhead = mean_p - cost * mean_n
    else:
        cost, overhead = 0.0, 0.0
    if cost <= 0 or overhead < 0:
        overhead, cost = 0.0, sum(p) / sum(n)
    residuals = [math.log(y / max(overhead + cost * x, 1e-9)) for x, y in zip(n, p)]
    sigma = math.sqrt(sum(r * r for r in residuals) / len(residuals)) if len(residuals) > 1 else 0.0
    extra = 0.0
    if skip_first and rows and rows is not fit_rows:
        extra = max(0.0, rows[0].processing_ms - (overhead + cost * rows[0].records))
    return CostModel(overhead_ms=overhead, cost_per_record_ms=cost, noise_sigma=min(sigma, 0.5),
                     first_batch_extra_ms=extra)


def rate_deviation(real: Sequence[float | None], simulated: Sequence[float | None],
                   band: float) -> tuple[float, float]:
    """(largest relative deviation, share within ``band``) over batches where both have a rate."""
    pairs = [(r, s) for r, s in zip(real, simulated) if r and s]
    if not pairs:
        return math.inf, 0.0
    deviations = [abs(s - r) / r for r, s in pairs]
    return max(deviations), sum(d <= band for d in deviations) / len(deviations)


def calibrate(batches: Sequence[RealBatch], *, estimator: str = "pid", batch_interval_ms: int = 1000,
              initial_rate: float | None = None, offered_rate: float | None = None,
              options: Mapping[str, Any] | None = None, band: float = 0.25, seed: int = 0,
              block_ms: int = 200, publish_latency_ms: float = 100.0) -> Calibration:
    """Fit the model to ``batches``, replay ``estimator`` on it, compare rates batch by batch.

    ``offered_rate`` defaults to the most records any batch held per second (a saturated
    source), which is what backpressure runs use.
    """
    import estimators

    model = fit_cost_model(batches)
    interval_s = batch_interval_ms / 1000
    if offered_rate is None:
        offered_rate = max(b.records for b in batches) / interval_s
    config = SimConfig(batch_interval_ms=batch_interval_ms, block_ms=block_ms, batches=len(batches),
                       initial_rate=initial_rate, publish_latency_ms=publish_latency_ms)
    instance = estimators.create(estimator, batch_interval_ms, dict(options or {}))
    trace = simulate(model, Source(offered=Constant(offered_rate)), config, instance, seed=seed,
                     scenario="calibration", estimator_name=estimator)
    real_rates = [b.rate for b in batches]
    simulated_rates = [b.rate_limit for b in trace.batches]
    worst, share = rate_deviation(real_rates, simulated_rates, band)
    notes = [f"fitted overhead {model.overhead_ms:.0f} ms, cost {model.cost_per_record_ms * 1000:.1f} us/record, "
             f"noise {model.noise_sigma:.1%}, first-batch extra {model.first_batch_extra_ms:.0f} ms"]
    return Calibration(model, trace, real_rates, simulated_rates, worst, share, band, notes)


def trace_to_real(trace: Trace) -> list[RealBatch]:
    """A simulated trace in the real-run format (for tests of this module, and round trips)."""
    return [RealBatch(b.records, b.processing_ms, b.scheduling_ms, b.rate_limit) for b in trace.batches]
