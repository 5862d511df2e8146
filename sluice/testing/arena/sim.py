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
* With ``slow_start`` (Sluice's controller, not Spark's), the initial rate is the ceiling of a
  probe that starts small and doubles while batches finish inside the interval, until the
  estimator's first estimate or in-flight cut (the same :class:`SlowStart` the driver runs).

Determinism: one ``random.Random(seed)`` draws one noise factor per batch, whether or not the
scenario has noise, so every estimator sees the same draws in the same order for a seed.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.errors import InvalidArgument
from sluice.estimators.base import InFlight, QueuedBatch, RateEstimator, RunningBatch
from sluice.estimators.slow_start import SlowStart
from sluice.testing.arena.model import CostModel, Source

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
    signal_interval_ms: int = 200  # the driver's in-flight sampling (estimators with ``observe``)
    slow_start: bool = False  # Sluice's probe before the first estimate (Spark has none)


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
    rate_limit: float | None  # receiver rate in force mid-interval (None: unbounded)
    estimate: float | None  # what the estimator returned after this batch
    from_estimator: bool  # rate_limit came from an estimate (not the initial rate)
    capacity_records: float  # largest sustainable batch when this one started
    available_records: float  # backlog + arrivals the receiver could have admitted
    backlog_after: float  # records left upstream at the batch time


@dataclass
class Trace:
    """Everything one run produced; metrics and plots read only this."""

    scenario: str
    estimator: str
    batch_interval_ms: int
    batches: list[BatchTrace] = field(default_factory=list)
    errors: int = 0  # estimator calls that raised or returned garbage


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
        rate = float(value)  # type: ignore[arg-type]  # an estimator may answer anything: float() is the check
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
        return float(value)  # type: ignore[arg-type]  # an estimator may answer anything: float() is the check
    except (TypeError, ValueError):
        return None


class _Pipeline:
    """The simulated pipeline's state between events (see :func:`simulate`)."""

    def __init__(
        self, model: CostModel, source: Source, config: SimConfig, estimator: RateEstimator, seed: int, trace: Trace
    ) -> None:
        self.model, self.source, self.config, self.estimator, self.trace = model, source, config, estimator, trace
        observe = getattr(estimator, "observe", None)  # an estimator with observe opted into in-flight signals
        self._observe: Callable[[InFlight], object] | None = observe if callable(observe) else None
        self.rng = random.Random(seed)
        self.interval = float(config.batch_interval_ms)
        self.block = float(config.block_ms)
        min_rate = getattr(estimator, "min_rate", 100.0)
        self.probe = SlowStart(self.interval, config.initial_rate, float(min_rate)) if config.slow_start else None
        first = config.initial_rate if self.probe is None else self.probe.rate
        self.schedule = _RateSchedule(first)
        self.published = first  # the rate in force as the driver knows it
        self.backlog = float(source.initial_backlog)  # upstream: offered, not admitted
        self.stored = 0.0  # limiter permits saved (SmoothBursty)
        self.filling = 0  # records admitted for the batch being filled
        self.filling_available = self.backlog  # ... and what was there to admit
        self.filling_blocks: list[tuple[float, int]] = []  # (block end ms, records) of that batch
        self.queue: list[_Cut] = []  # cut, waiting to start
        self.running: _Cut | None = None
        self.previous_end = 0.0

    def rate_at(self, time_ms: float) -> tuple[float | None, bool]:
        rate, from_estimator = self.schedule.at(time_ms)
        cap = self.config.receiver_max_rate
        if cap is not None:
            rate = cap if rate is None else min(rate, cap)
        return rate, from_estimator

    def admit_block(self, block_start: float) -> None:
        """Admission over one block interval at the rate in force when it starts."""
        arrived = self.source.arrivals(block_start / 1000, (block_start + self.block) / 1000)
        self.backlog += arrived
        self.filling_available += arrived
        rate, _ = self.rate_at(block_start)
        if rate is None:
            admitted = math.floor(self.backlog)
        else:
            budget = self.stored + rate * self.block / 1000
            admitted = math.floor(min(self.backlog, budget))
            self.stored = min(rate * 1.0, budget - admitted)  # SmoothBursty: at most 1 s stored
        self.backlog -= admitted
        self.filling += admitted
        self.filling_blocks.append((block_start + self.block, admitted))

    def cut(self, index: int, batch_time: float) -> _Cut:
        """The batch of ``batch_time``: every block of the interval before it."""
        rate_mid, from_estimator = self.rate_at(batch_time - self.interval / 2)
        batch = _Cut(index, batch_time, self.filling, self.filling_available, self.backlog, rate_mid, from_estimator)
        self.filling, self.filling_available, self.filling_blocks = 0, self.backlog, []
        return batch

    def start(self, batch: _Cut, when: float) -> None:
        """Processing time is decided when the batch starts (one noise draw per batch, in order)."""
        model = self.model
        noise = math.exp(self.rng.gauss(0.0, 1.0) * model.noise_sigma - model.noise_sigma**2 / 2)
        processing = model.processing_ms(batch.records, when / 1000, noise)
        if batch.index == 1:
            processing += model.first_batch_extra_ms
        batch.start, batch.processing, batch.end = when, processing, when + processing
        self.running = batch

    def publish(self, answer: object, when: float, batch: _Cut | None = None) -> None:
        """Publish an estimator's answer as the driver would: after a completed ``batch`` through
        the slow start's probe while it runs; an in-flight cut ends the probe."""
        published = _clean_rate(answer)
        if answer is not None and published is None:
            self.trace.errors += 1
        if self.probe is not None:
            if batch is None:
                if published is not None:
                    self.probe.finish()
            else:
                decided = self.probe.settle(published, batch.records, batch.processing, batch.start - batch.batch_time)
                published = None if decided is None else decided[0]
        if published is not None:
            self.schedule.add(when + self.config.publish_latency_ms, published)
            self.published = published

    def complete(self, batch: _Cut) -> None:
        """Feed the estimator as ``RateController.onBatchCompleted`` does; record the batch."""
        processing = batch.processing
        estimate = None
        if batch.records > 0:
            try:
                estimate = self.estimator.compute(
                    int(round(batch.end)),
                    int(batch.records),
                    max(1, int(round(processing))),
                    int(round(batch.start - batch.batch_time)),
                )
            except Exception:  # noqa: BLE001 - an estimator that raises never stops the stream (DESIGN, Plugins)
                self.trace.errors += 1
                estimate = None
            self.publish(estimate, batch.end, batch)
        self.trace.batches.append(
            BatchTrace(
                index=batch.index,
                batch_time_ms=batch.batch_time,
                records=int(batch.records),
                start_ms=batch.start,
                end_ms=batch.end,
                processing_ms=processing,
                scheduling_ms=batch.start - batch.batch_time,
                rate_limit=batch.rate_mid,
                estimate=_as_float(estimate),
                from_estimator=batch.from_estimator,
                capacity_records=self.model.capacity_records(self.interval, batch.start / 1000),
                available_records=batch.available,
                backlog_after=batch.backlog_after,
            )
        )
        self.previous_end = batch.end
        self.running = None

    def signals(self, now: float) -> InFlight:
        """What the driver's sampler would see at ``now`` (nothing the future decides)."""
        running = (
            ()
            if self.running is None
            else (RunningBatch(int(self.running.batch_time), int(self.running.records), now - self.running.start),)
        )
        backlog = sum(records for end, records in self.filling_blocks if end <= now)
        return InFlight(
            now,
            running,
            tuple(QueuedBatch(int(b.batch_time), int(b.records)) for b in self.queue),
            backlog_records=int(backlog),
            receiver_lag=int(self.backlog),
            rate=self.published,
        )

    def observe(self, now: float) -> None:
        if self._observe is None:  # simulate samples only an estimator with observe
            return
        try:
            answer = self._observe(self.signals(now))
        except Exception:  # noqa: BLE001 - as for compute
            self.trace.errors += 1
            return
        self.publish(answer, now)


@dataclass
class _Cut:
    """A batch from its cut to its end (start and end are set when it starts)."""

    index: int
    batch_time: float
    records: int
    available: float
    backlog_after: float
    rate_mid: float | None
    from_estimator: bool
    start: float = math.nan
    processing: float = math.nan
    end: float = math.nan


# Events at the same time run in this order: a batch that ends frees the job thread and publishes
# first; then the tick cuts the batch of the interval just over; the driver samples what it sees;
# a block starts last (a rate published at that very time applies from the next block on, as
# the publish latency is added to it anyway).
_END, _TICK, _SAMPLE, _BLOCK = range(4)


def simulate(
    model: CostModel,
    source: Source,
    config: SimConfig,
    estimator: RateEstimator,
    *,
    seed: int = 0,
    scenario: str = "",
    estimator_name: str = "",
) -> Trace:
    """Run ``config.batches`` batches of the pipeline driven by ``estimator`` (has ``compute``).

    Events (block starts, batch ticks, batch ends and, for an estimator with ``observe``, the
    driver's samples every ``config.signal_interval_ms``) run in time order, so every estimator
    call sees only what happened before it.
    """
    interval = float(config.batch_interval_ms)
    block = float(config.block_ms)
    if interval <= 0 or block <= 0 or interval % block:
        raise InvalidArgument(
            f"arena: batch_interval_ms ({interval:g}) must be a positive multiple of block_ms ({block:g})"
        )
    trace = Trace(scenario, estimator_name, config.batch_interval_ms)
    state = _Pipeline(model, source, config, estimator, seed, trace)
    sampling = callable(getattr(estimator, "observe", None)) and config.signal_interval_ms > 0
    last_tick = config.batches * interval
    events: list[tuple[float, int, int, Any]] = []
    seq = itertools.count()

    def at(time_ms: float, kind: int, payload: Any = None) -> None:
        heapq.heappush(events, (time_ms, kind, next(seq), payload))

    at(0.0, _BLOCK)
    at(interval, _TICK, 1)
    if sampling:
        at(float(config.signal_interval_ms), _SAMPLE)
    while len(trace.batches) < config.batches:
        now, kind, _, payload = heapq.heappop(events)
        if kind == _BLOCK:
            state.admit_block(now)
            if now + block < last_tick:
                at(now + block, _BLOCK)
        elif kind == _TICK:
            state.queue.append(state.cut(payload, now))
            if payload < config.batches:
                at(now + interval, _TICK, payload + 1)
        elif kind == _END:
            state.complete(payload)
        else:
            state.observe(now)
            at(now + config.signal_interval_ms, _SAMPLE)
        if state.running is None and state.queue:
            batch = state.queue.pop(0)
            state.start(batch, max(batch.batch_time, state.previous_end))
            at(batch.end, _END, batch)
    return trace
