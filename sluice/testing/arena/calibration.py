"""Holding the arena against a real run: fit the model, replay, compare.

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
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from sluice import estimators
from sluice.errors import InvalidArgument
from sluice.testing.arena.model import Constant, CostModel, Source, Steps
from sluice.testing.arena.sim import SimConfig, Trace, simulate

__all__ = [
    "RealBatch",
    "Calibration",
    "fit_cost_model",
    "calibrate",
    "rate_deviation",
    "trace_to_real",
    "rate_in_force",
    "PhaseComparison",
    "compare_phases",
]


class RealBatch(NamedTuple):
    """One batch of a real run, as the driver's BatchInfo and the published rate give it."""

    records: int
    processing_ms: float
    scheduling_ms: float
    rate: float | None  # receiver rate limit in force while the batch was filled (None: none)


@dataclass(frozen=True)
class Calibration:
    model: CostModel
    simulated: Trace
    real_rates: list[float | None]
    simulated_rates: list[float | None]
    max_relative_deviation: float  # over batches where both have a rate
    within_band: float  # share of those batches within ``band``
    band: float
    notes: list[str] = field(default_factory=list)


def fit_cost_model(batches: Sequence[RealBatch], *, skip_first: bool = True) -> CostModel:
    """Least-squares ``overhead + cost x records`` over the non-empty batches.

    The first batch is skipped by default: it pays the start-up (executors, Python workers)
    that no later batch pays; its excess is kept as ``first_batch_extra_ms``.  Falls back to
    zero overhead (time proportional to records) when the batch sizes never varied.  The
    residual spread (weighted by batch time, see below) becomes ``noise_sigma``.
    """
    rows = [b for b in batches if b.records > 0 and b.processing_ms > 0]
    fit_rows = rows[1:] if skip_first and len(rows) > 2 else rows
    if not fit_rows:
        raise InvalidArgument("calibration: the trace has no batch with records and a processing time")
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
    # The noise is multiplicative in the model, but a real run's jitter is mostly a few whole
    # milliseconds: on a 20 ms batch that is 10 %, on a 1 s batch 0.2 %.  Weighting each log
    # residual by the batch's predicted time fits the noise where the controller lives (batches
    # near the interval) instead of letting tiny batches at the minimum rate inflate it.
    predicted = [max(overhead + cost * x, 1e-9) for x in n]
    residuals = [math.log(y / q) for q, y in zip(predicted, p)]
    sigma = (
        math.sqrt(sum(q * r * r for q, r in zip(predicted, residuals)) / sum(predicted)) if len(residuals) > 1 else 0.0
    )
    extra = 0.0
    if skip_first and rows and rows is not fit_rows:
        extra = max(0.0, rows[0].processing_ms - (overhead + cost * rows[0].records))
    return CostModel(
        overhead_ms=overhead, cost_per_record_ms=cost, noise_sigma=min(sigma, 0.5), first_batch_extra_ms=extra
    )


def rate_deviation(real: Sequence[float | None], simulated: Sequence[float | None], band: float) -> tuple[float, float]:
    """(largest relative deviation, share within ``band``) over batches where both have a rate."""
    pairs = [(r, s) for r, s in zip(real, simulated) if r and s]
    if not pairs:
        return math.inf, 0.0
    deviations = [abs(s - r) / r for r, s in pairs]
    return max(deviations), sum(d <= band for d in deviations) / len(deviations)


def calibrate(
    batches: Sequence[RealBatch],
    *,
    estimator: str = "pid",
    batch_interval_ms: int = 1000,
    initial_rate: float | None = None,
    offered_rate: float | None = None,
    options: Mapping[str, Any] | None = None,
    band: float = 0.25,
    seed: int = 0,
    block_ms: int = 200,
    publish_latency_ms: float = 100.0,
    partial_first_batch: bool = False,
    first_batch_start_ms: float = 0.0,
) -> Calibration:
    """Fit the model to ``batches``, replay ``estimator`` on it, compare rates batch by batch.

    ``offered_rate`` defaults to the most records any batch held per second (a saturated
    source), which is what backpressure runs use.  A real run starts its receiver somewhere
    inside the first interval: ``partial_first_batch`` offers, in the first interval, exactly
    the records the real first batch held (then ``offered_rate``), and ``first_batch_start_ms``
    (the real first batch's scheduling delay: job submission warming up) is added to the first
    batch's time, so the replay starts from the same queue as the real run.
    """

    model = fit_cost_model(batches)
    if first_batch_start_ms:
        model = replace(model, first_batch_extra_ms=model.first_batch_extra_ms + first_batch_start_ms)
    interval_s = batch_interval_ms / 1000
    if offered_rate is None:
        offered_rate = max(b.records for b in batches) / interval_s
    offered: Any = Constant(offered_rate)
    if partial_first_batch and batches:
        offered = Steps(batches[0].records / interval_s, ((interval_s, offered_rate),))
    config = SimConfig(
        batch_interval_ms=batch_interval_ms,
        block_ms=block_ms,
        batches=len(batches),
        initial_rate=initial_rate,
        publish_latency_ms=publish_latency_ms,
    )
    instance = estimators.create(estimator, batch_interval_ms, dict(options or {}))
    trace = simulate(
        model, Source(offered=offered), config, instance, seed=seed, scenario="calibration", estimator_name=estimator
    )
    real_rates = [b.rate for b in batches]
    simulated_rates = [b.rate_limit for b in trace.batches]
    worst, share = rate_deviation(real_rates, simulated_rates, band)
    notes = [
        f"fitted overhead {model.overhead_ms:.0f} ms, cost {model.cost_per_record_ms * 1000:.1f} us/record, "
        f"noise {model.noise_sigma:.1%}, first-batch extra {model.first_batch_extra_ms:.0f} ms"
    ]
    return Calibration(model, trace, real_rates, simulated_rates, worst, share, band, notes)


def trace_to_real(trace: Trace) -> list[RealBatch]:
    """A simulated trace in the real-run format (for tests of this module, and round trips)."""
    return [RealBatch(b.records, b.processing_ms, b.scheduling_ms, b.rate_limit) for b in trace.batches]


def rate_in_force(publishes: Sequence[tuple[float, float]], time_ms: float) -> float | None:
    """The last rate published at or before ``time_ms`` (``publishes``: (time ms, rate), ascending)."""
    rate = None
    for when, value in publishes:
        if when > time_ms:
            break
        rate = value
    return rate


@dataclass(frozen=True)
class PhaseComparison:
    """Two rate-per-batch curves compared phase by phase (see ``compare_phases``)."""

    unbounded: tuple[int, int]  # (real, simulated) batches before the first rate
    at_min_rate: tuple[int, int]  # batches whose rate was the minimum rate
    to_steady: tuple[int | None, int | None]  # first batch from which the rate stays near steady
    steady_rate: tuple[float, float]  # median rate over the last ``steady_window`` batches
    settling_median_deviation: float  # median |sim - real| / max(real, a tenth of real steady),
    # first rate .. real steady (batches where both sat at the
    # minimum rate left out)
    settling_within: float  # share of settling batches within ``settling_band``
    steady_median_deviation: float  # the same over the last ``steady_window`` batches
    settling_band: float

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _to_steady(rates: Sequence[float | None], steady: float, tolerance: float) -> int | None:
    start = None
    for i in range(len(rates) - 1, -1, -1):
        rate = rates[i]
        if rate is None or abs(rate - steady) > tolerance * steady:
            break
        start = i
    return start


def compare_phases(
    real: Sequence[float | None],
    simulated: Sequence[float | None],
    *,
    steady_window: int = 10,
    min_rate: float = 100.0,
    steady_tolerance: float = 0.05,
    settling_band: float = 0.25,
) -> PhaseComparison:
    """Compare two rate-per-batch curves where a controller's story happens, phase by phase.

    One largest deviation says little: a curve that leaves the minimum rate one batch later
    deviates by a factor of 40 on that batch and is still the same curve.  So: how long each
    ran unbounded, how many batches each sat at the minimum rate, when each reached steady
    (the rate within ``steady_tolerance`` of its final median, staying so), the steady rates,
    and the median relative deviation over the settling phase (from the real run's first rate
    to its steady start, leaving out batches where both sat at the minimum rate, which
    ``at_min_rate`` already compares) and over the steady window.  A settling deviation is taken
    against a tenth of the real steady rate at least: a rate just above the minimum is a rate less a
    correction nearly as large (a PID cutting 2,124/s to 105/s), so there a deviation of 1.4 % of
    capacity in what both curves subtract reads as 68 % of the rate.
    """
    n = min(len(real), len(simulated))
    real, simulated = list(real[:n]), list(simulated[:n])

    def unbounded(rates: list[float | None]) -> int:
        return next((i for i, r in enumerate(rates) if r is not None), len(rates))

    def steady_rate(rates: list[float | None]) -> float:
        tail = [r for r in rates[-steady_window:] if r is not None]
        return statistics.median(tail) if tail else math.nan

    steady = (steady_rate(real), steady_rate(simulated))
    to_steady = (_to_steady(real, steady[0], steady_tolerance), _to_steady(simulated, steady[1], steady_tolerance))
    at_min = tuple(sum(1 for r in rates if r is not None and r <= min_rate + 0.5) for rates in (real, simulated))
    first = unbounded(real)
    end = to_steady[0] if to_steady[0] is not None else n
    floor = min_rate + 0.5  # both at the minimum rate: equal by construction, counted in at_min_rate
    scale = 0.0 if math.isnan(steady[0]) else steady[0] / 10  # no steady rate: no floor
    settling = [
        abs(s - r) / max(r, scale)
        for r, s in zip(real[first:end], simulated[first:end])
        if r and s and not (r <= floor and s <= floor)
    ]
    steady_devs = [abs(s - r) / r for r, s in zip(real[-steady_window:], simulated[-steady_window:]) if r and s]
    return PhaseComparison(
        unbounded=(first, unbounded(simulated)),
        at_min_rate=(at_min[0], at_min[1]),
        to_steady=to_steady,
        steady_rate=steady,
        settling_median_deviation=statistics.median(settling) if settling else math.nan,
        settling_within=sum(d <= settling_band for d in settling) / len(settling) if settling else 0.0,
        steady_median_deviation=statistics.median(steady_devs) if steady_devs else math.nan,
        settling_band=settling_band,
    )
