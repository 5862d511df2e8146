"""A deterministic simulation of Spark Streaming's receiver pipeline under the ``fixed`` trigger.

Why each rule is what it is (every one mirrors a Spark behaviour, spark-notes sections 3, 4, 12):

* A batch is cut every interval whatever happens (the DStream ``fixed`` trigger):
  batch ``k`` holds the blocks completed in ``((k-1) I, k I]``, and batches run one at a time
  (``concurrent_jobs = 1``), so a slow batch makes the next ones wait and scheduling delay is
  real, not a formula.
* The receiver admits records through a token bucket whose rate is the latest rate the
  estimator published (SmoothBursty: unused permits are stored up to one second's worth),
  checked at each block start (``block_ms``, Spark's 200 ms block interval).  Before the first
  estimate the rate is the scenario's initial rate, or unbounded when it has none (Spark with
  no ``initialRate`` and no ``receiver.maxRate``): the first batch takes whatever is there.
* Records not admitted stay upstream (Kafka lag): nothing is dropped, throughput can catch up.
* The estimator is fed exactly as ``RateController.onBatchCompleted`` feeds it: time = the
  processing *end*, the batch's records, processing delay, scheduling delay, all in whole
  milliseconds; batches with no records are skipped; a rate is truncated to a whole number
  (``rate.toLong``) and a non-positive, NaN or infinite one is ignored, as receivers ignore it.
  The published rate reaches receivers ``publish_latency_ms`` later (tracker round trip).

Determinism: one ``random.Random(seed)`` draws one noise factor per batch, whether or not the
scenario has noise, so every estimator sees the same draws in the same order for a seed.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field

from sluice.estimators.arena.model import CostModel, Source

__all__ = ["SimConfig", "BatchTrace", "Trace", "simulate"]


@dataclass(frozen=True)
class SimConfig:
    """The pipeline around the estimator (what Spark's configuration decides)."""

    batch_interval_ms: int = 1000
    block_ms: int = 200
    batches: int = 120
    initial_rate: float | None = None
    receiver_max_rate: float | None = None
    publish_latency_ms: float = 100.0


@dataclass(frozen=True)
class BatchTrace:
    """One batch as the arena saw it (times in ms since the simulation started)."""

    index: int
    batch_time_ms: float
    records: int
    start_ms: float
    end_ms: float
    processing_ms: float
    scheduling_ms: float
    rate_limit: float | None      # receiver rate in force mid-interval (None: unbounded)
    estimate: float | None        # what the estimator returned after this batch
    from_estimator: bool          # rate_limit came from an estimate (not the initial rate)
    capacity_records: float       # largest sustainable batch when this one started
    available_records: float      # backlog + arrivals the receiver could have admitted
    backlog_after: float          # records left upstream at the batch time


@dataclass
class Trace:
    """Everything one run produced; metrics and plots read only this."""

    scenario: str
    estimator: str
    batch_interval_ms: int
    batches: list[BatchTrace] = field(default_factory=list)
    errors: int = 0               # estimator calls that raised or returned garbage


class _RateSchedule:
    """Published rates by the time they reach the receivers (appended in time order)."""

    def __init__(self, initial: float | None) -> None:
        self.times: list[float] = []
        self.rates: list[float] = []
        self.initial = initial

    def add(self, time_ms: float, rate: float) -> None:
        self.times.append(time_ms)
        self.rates.append(rate)

    def at(self, time_ms: float) -> tuple[float | None, bool]:
        """(rate in force at ``time_ms``, whether it came from an estimate)."""
        i = bisect.bisect_right(self.times, time_ms)
        if i == 0:
            return self.initial, False
        return self.rates[i - 1], True


def _clean_rate(value: object) -> float | None:
    """What a receiver would apply: ``toLong`` truncation, non-positive/NaN/inf ignored."""
    if value is None or isinstance(value, bool):
        return None
    try:
        rate = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if not math.isfinite(rate) or rate < 1.0:
        return None
    return float(int(rate))


def _as_float(value: object) -> float | None:
    """The raw estimate as a float for the trace (NaN/inf kept: the trace shows what came back)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def simulate(model: CostModel, source: Source, config: SimConfig, estimator: object, *,
             seed: int = 0, scenario: str = "", estimator_name: str = "") -> Trace:
    """Run ``config.batches`` batches of the pipeline driven by ``estimator`` (has ``compute``)."""
    rng = random.Random(seed)
    interval = float(config.batch_interval_ms)
    block = float(config.block_ms)
    if interval <= 0 or block <= 0 or interval % block:
        raise ValueError(f"arena: batch_interval_ms ({interval:g}) must be a positive multiple "
                         f"of block_ms ({block:g})")
    trace = Trace(scenario, estimator_name, config.batch_interval_ms)
    schedule = _RateSchedule(config.initial_rate)
    backlog = float(source.initial_backlog)
    stored = 0.0
    previous_end = 0.0
    blocks_per_batch = int(interval // block)
    for k in range(1, config.batches + 1):
        batch_time = k * interval
        first_block = batch_time - interval
        available = backlog
        records = 0
        for j in range(blocks_per_batch):
            block_start = first_block + j * block
            arrived = source.arrivals(block_start / 1000, (block_start + block) / 1000)
            backlog += arrived
            available += arrived
            rate, _ = schedule.at(block_start)
            if config.receiver_max_rate is not None:
                rate = config.receiver_max_rate if rate is None else min(rate, config.receiver_max_rate)
            if rate is None:
                admitted = math.floor(backlog)
            else:
                budget = stored + rate * block / 1000
                admitted = math.floor(min(backlog, budget))
                stored = min(rate * 1.0, budget - admitted)  # SmoothBursty: at most 1 s stored
            backlog -= admitted
            records += admitted
        rate_mid, from_estimator = schedule.at(batch_time - interval / 2)
        if config.receiver_max_rate is not None:
            rate_mid = config.receiver_max_rate if rate_mid is None else min(rate_mid, config.receiver_max_rate)
        start = max(batch_time, previous_end)
        noise = math.exp(rng.gauss(0.0, 1.0) * model.noise_sigma - model.noise_sigma ** 2 / 2)
        processing = model.processing_ms(records, start / 1000, noise)
        if k == 1:
            processing += model.first_batch_extra_ms
        end = start + processing
        previous_end = end
        estimate = None
        if records > 0:
            try:
                estimate = estimator.compute(int(round(end)), int(records),  # type: ignore[attr-defined]
                                             max(1, int(round(processing))), int(round(start - batch_time)))
            except Exception:  # noqa: BLE001 - an estimator that raises never stops the stream (DESIGN, Plugins)
                trace.errors += 1
                estimate = None
            published = _clean_rate(estimate)
            if estimate is not None and published is None:
                trace.errors += 1
            if published is not None:
                schedule.add(end + config.publish_latency_ms, published)
        trace.batches.append(BatchTrace(
            index=k, batch_time_ms=batch_time, records=int(records), start_ms=start, end_ms=end,
            processing_ms=processing, scheduling_ms=start - batch_time, rate_limit=rate_mid,
            estimate=_as_float(estimate), from_estimator=from_estimator,
            capacity_records=model.capacity_records(interval, start / 1000),
            available_records=available, backlog_after=backlog))
    return trace
