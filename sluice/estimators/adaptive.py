"""``AdaptiveRateEstimator`` ("adaptive"): a model-based rate controller, opt-in beside Spark's PID.

It sees exactly what Spark's PID sees (the four ``compute`` arguments and the batch interval).
It fits ``processing = k (alpha + n)``: ``alpha``, the per-batch overhead in records, learnt slowly
(weighted recursive least squares, forgetting factor ``forgetting``); ``k``, the milliseconds per
record-equivalent, read afresh from every batch (``smoothing`` of the previous value averaged in,
none when it moved by more than 8 %).  The next batch is sized to fill ``utilization`` x the
interval minus what the queued batches are predicted to cost; a queue of an interval or more is
drained in ``drain_batches`` batches, a shorter one gently, and never below ``floor_fraction`` of
the modelled capacity.  It answers from the first batch and grows at most ``trust_growth`` x the
largest recent batch, or to what a batch that finished inside the interval showed at its own speed
(``records x interval / processing``, the PID's processing rate) when that is more.  Why each
choice, and what the arena measured: docs/guide/rate-control.md.

In-flight signals (``observe``, which Spark's interface lacks): a running batch that has already
taken longer than its records should at the modelled speed proves the speed has dropped at least
to ``elapsed / (alpha + records)``; the controller sizes the next batches for that speed at once,
while the overloaded batch is still running, and lowers the rate again as the batch keeps running
(it never raises the rate on a signal).  The batches queued behind it are costed with their real
record counts (the last sample's) instead of the rates that were in force when they were cut, both
then and when the next batch completes, so the drain is sized on the work actually waiting.

Guards: every result is finite, at least ``min_rate`` (Spark's ``minRate``, 100) and at most
``max_rate`` (none by default).  Inputs that are not finite numbers, empty batches, a zero
processing time, or a time not after the last update return ``None`` and change nothing.
Pure: no I/O, no clock; ``compute`` and ``observe`` are serialised by a lock, as Spark's is.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Mapping
from typing import Any

from sluice.errors import InvalidArgument
from sluice.estimators.base import InFlight, QueuedBatch, RunningBatch

__all__ = ["AdaptiveRateEstimator", "adaptive_factory", "DEFAULTS"]

DEFAULTS: dict[str, float] = {
    "min_rate": 100.0,
    "max_rate": math.inf,
    "utilization": 1.0,
    "drain_batches": 3.0,
    "forgetting": 0.97,
    "smoothing": 0.3,
    "trust_growth": 2.0,
    "floor_fraction": 0.1,
}

_GENTLE_DRAIN = 0.2  # share of a sub-interval queue drained per batch
_TRUST_WINDOW = 32  # batches whose sizes the model has been seen to hold for
_MAX_PENDING = 200  # queued batches costed one by one (a bound on work per call)
_BAND_FLOOR = 0.96  # a gentle drain never aims below this share of the interval
_CHANGE = 0.08  # a speed change larger than this is a capacity change, not noise
_SIGNAL_STEP = 0.05  # a signal lowers the rate only by more than this (no churn of tiny cuts)


def _cut_batches(signals: InFlight) -> list[RunningBatch | QueuedBatch]:
    """The batches a sample saw cut and not completed, running and queued."""
    return [*signals.running, *signals.queued]


def _number(name: str, value: Any, low: float, high: float, *, low_open: bool = False) -> float:
    """``value`` as a float within the bounds, or ``ValueError`` naming the option."""
    if isinstance(value, bool):
        raise InvalidArgument(f"estimator 'adaptive': option {name!r} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"estimator 'adaptive': option {name!r} must be a number, got {value!r}") from None
    ok = (number > low if low_open else number >= low) and number <= high and not math.isnan(number)
    if not ok:
        bound = f"{'>' if low_open else '>='} {low:g} and <= {high:g}"
        raise InvalidArgument(f"estimator 'adaptive': option {name!r} must be {bound}, got {value!r}")
    return number


class _Overhead:
    """The batch's fixed cost expressed in records: ``alpha`` in ``processing = k (alpha + n)``.

    Why this parametrisation: ``k`` (ms per record-equivalent) is the system's *speed*, which
    changes whenever capacity does (a noisy neighbour, a daily cycle) and is read afresh from
    every batch: ``k = p / (alpha + n)``.  ``alpha`` is the *shape* of the cost, the same at any
    speed (overhead and per-record cost slow down together), so it can be learnt slowly over
    many batches without a capacity change corrupting it.  ``alpha = 0`` is the PID's model
    (time proportional to records); a fixed overhead makes it positive; past a GC/spill cliff
    the local line is steeper than the average and ``alpha`` turns negative, which is what
    keeps the controller from overshooting into the cliff again.

    Each pair of consecutive batches whose sizes differ by at least ``MIN_STEP``, and whose
    times move the same way as their sizes, yields one value,
    ``alpha = (n1 p0 - n0 p1) / (p1 - p0)``, clipped to [-0.75, 2] x the batch size.  More
    records in less time is a speed change or the first job's start-up costs, not a shape: read
    as one, it would be the most negative overhead allowed and undersize the batches after it
    (a capacity step between two similar batches looks like an absurd shape and must move the
    estimate only a little); values are averaged with weights (relative size change)^2 and
    forgetting factor ``lam`` (weighted recursive least squares of a constant).  A weak prior
    of 0 keeps it defined before sizes have varied.
    """

    PRIOR_WEIGHT = 0.002  # as much as one pair of batches differing by 4.5 %
    MIN_STEP = 0.02

    def __init__(self, lam: float) -> None:
        self.lam = lam
        self.num = self.den = 0.0

    def add(self, n0: float, p0: float, n1: float, p1: float) -> None:
        step = (n1 - n0) / max(n0, n1)
        if abs(step) < self.MIN_STEP or (n1 - n0) * (p1 - p0) <= 0:
            return  # sizes too alike, or more records in less time: the speed moved, not the shape
        size = max(n0, n1)
        value = min(max((n1 * p0 - n0 * p1) / (p1 - p0), -0.75 * size), 2.0 * size)
        weight = step * step
        self.num = self.lam * self.num + weight * value
        self.den = self.lam * self.den + weight

    @property
    def informed(self) -> bool:
        """Whether any pair of differently sized batches has been seen yet."""
        return self.den > self.PRIOR_WEIGHT

    def value(self, n: float) -> float:
        """``alpha`` for a batch of ``n`` records (kept above -0.75 n so time stays positive)."""
        return max((self.num + 0.0) / (self.den + self.PRIOR_WEIGHT), -0.75 * n)


class AdaptiveRateEstimator:
    """Cost-model rate controller; see the module docstring for the why of every part."""

    def __init__(self, batch_interval_ms: float, **options: Any) -> None:
        unknown = sorted(set(options) - set(DEFAULTS))
        if unknown:
            raise InvalidArgument(
                f"estimator 'adaptive': unknown option(s) {', '.join(map(repr, unknown))}; "
                f"allowed: {', '.join(sorted(DEFAULTS))}"
            )
        o = {**DEFAULTS, **options}
        self.batch_interval_ms = _number("batch_interval_ms", batch_interval_ms, 0, 1e12, low_open=True)
        self.min_rate = _number("min_rate", o["min_rate"], 0, 1e15, low_open=True)
        self.max_rate = _number("max_rate", o["max_rate"], self.min_rate, math.inf)
        self.utilization = _number("utilization", o["utilization"], 0.1, 1.0)
        self.drain_batches = _number("drain_batches", o["drain_batches"], 1.0, 1000.0)
        self.forgetting = _number("forgetting", o["forgetting"], 0.0, 0.999)
        self.smoothing = _number("smoothing", o["smoothing"], 0.0, 0.99)
        self.trust_growth = _number("trust_growth", o["trust_growth"], 1.0, 100.0, low_open=True)
        self.floor_fraction = _number("floor_fraction", o["floor_fraction"], 0.0, 1.0)
        self._lock = threading.Lock()
        self._latest_time = -math.inf
        self._shape = _Overhead(self.forgetting)
        self._previous: tuple[float, float] | None = None  # (records, processing ms)
        self._recent: list[float] = []  # sizes of the last few batches (trust region)
        self._published_times: list[float] = []  # when each of our rates was returned (ms)
        self._published_records: list[float] = []  # ... as records per batch
        self._last_rate: float | None = None
        self._k: float | None = None
        self._signals: InFlight | None = None  # the last in-flight sample (observe)

    def _records_at(self, time_ms: float, fallback: float) -> float:
        """Records per batch our published rate allowed at ``time_ms`` (``fallback`` before any)."""
        i = bisect.bisect_right(self._published_times, time_ms)
        return self._published_records[i - 1] if i else fallback

    def _known_records(self, first: float) -> dict[int, float]:
        """Records of the batches from batch time ``first`` on that the last sample saw cut
        (queued or running), by their position after ``first``."""
        signals = self._signals
        if signals is None:
            return {}
        interval = self.batch_interval_ms
        known = {}
        for batch in _cut_batches(signals):
            position = round((batch.batch_time_ms - first) / interval)
            if position >= 0:
                known[position] = float(batch.records)
        return known

    def _predicted_delay(self, time_ms: float, batch_time: float, k: float, alpha: float, fallback: float) -> float:
        """Scheduling delay the next batch we size will see: work queued now minus time left.

        Batches after the completed one (its batch time is ``time - processing - scheduling``)
        up to now are queued; each holds what the last in-flight sample saw it hold, else what
        the rate in force mid-interval allowed (what we published, or the completed batch's size
        before we published anything), and is costed with the model at today's speed ``k``.
        """
        interval = self.batch_interval_ms
        first = batch_time + interval
        pending = max(0, math.floor((time_ms - first) / interval) + 1)
        counted = min(pending, _MAX_PENDING)  # beyond that, the newest batches stand for all
        known = self._known_records(first)
        queued = 0.0
        informed = self._shape.informed
        for i in range(pending - counted, pending):
            records = known.get(i)
            if records is None:
                records = self._records_at(first + i * interval - interval / 2, fallback)
            if informed:
                queued += max(0.0, k * (alpha + records))
            else:
                # Shape unknown (all batches the same size so far): a smaller batch is not
                # assumed cheaper than the one just seen.  Optimism here would undercount the
                # queue and refill it; pessimism only drains a batch longer.
                queued += k * (alpha + fallback) * max(1.0, records / fallback)
        if counted:
            queued *= pending / counted
        # The first batch still being filled starts once the queue is done.
        return max(0.0, time_ms + queued - (first + pending * interval))

    def _speed(self, latest: float) -> float:
        """Today's ms per record-equivalent: the latest batch's, lightly averaged with the
        previous ones (``smoothing``) to keep timing noise out of the next batch size, but
        taken as is when it moved by more than ``_CHANGE`` (capacity changed: follow at once)."""
        if self._k is None or abs(latest / self._k - 1.0) > _CHANGE:
            self._k = latest
        else:
            self._k = self.smoothing * self._k + (1.0 - self.smoothing) * latest
        return self._k

    def compute(self, time_ms: int, elements: int, processing_delay_ms: int, scheduling_delay_ms: int) -> float | None:
        """The rate (records/s) for the next batches, or ``None`` for a batch that says nothing."""
        try:
            now, n, p = float(time_ms), float(elements), float(processing_delay_ms)
            sched = float(scheduling_delay_ms) if scheduling_delay_ms is not None else 0.0
        except (TypeError, ValueError):
            return None
        if not all(math.isfinite(x) for x in (now, n, p, sched)) or n <= 0 or p <= 0:
            return None
        sched = max(0.0, sched)
        with self._lock:
            if now <= self._latest_time:
                return None
            self._latest_time = now
            previous, first = self._previous, self._previous is None
            if previous is not None:
                self._shape.add(*previous, n, p)
            self._previous = (n, p)
            self._recent = (self._recent + [n])[-_TRUST_WINDOW:]
            alpha = self._shape.value(n)
            k = self._speed(p / (alpha + n))  # ms per record-equivalent, right now
            delay = self._predicted_delay(now, now - p - sched, k, alpha, n)
            trusted = max(self._recent)
            if self._last_rate is not None and p + sched <= self.batch_interval_ms:
                # Inside the interval: the size already asked for is trusted too, or growth would
                # be paced by batches cut before our last answer reached the receivers (their
                # records lag the rate by a batch) instead of by what the batches showed.
                trusted = max(trusted, self._last_rate * self.batch_interval_ms / 1000.0)
            if p + sched <= self.batch_interval_ms:
                # And what this batch showed: at its own speed, overhead and all (the PID's
                # processing rate), n x interval / p records fit.  Growth to there needs no
                # trust in the model; past there, only trust_growth x (a cliff may lie beyond).
                trusted = max(trusted, n * self.batch_interval_ms / p / self.trust_growth)
            rate = self._size(k, alpha, delay, trusted)
            if first:
                # The first job also pays one-off start-up costs (executors, Python workers)
                # that no later batch pays: alone, it cuts to half its own rate at most.
                rate = max(rate, self._guard(0.5 * n * 1000.0 / self.batch_interval_ms))
            return self._published(now, rate)

    def observe(self, signals: InFlight) -> float | None:
        """Act on a batch still running past what its records should take (see the module
        docstring); keep the sample for sizing the drain.  Lowers the rate or says nothing."""
        now = signals.time_ms
        if not (isinstance(now, (int, float)) and math.isfinite(now)):
            return None
        with self._lock:
            self._signals = signals
            if not signals.running:
                return None
            running = signals.running[0]  # the oldest: the one the queue waits for
            n, elapsed = float(running.records), float(running.elapsed_ms)
            if not (n > 0 and math.isfinite(elapsed)):
                return None
            interval = self.batch_interval_ms
            alpha = self._shape.value(n) if self._k is not None else 0.0
            k_low = elapsed / (alpha + n)  # the speed is at least this slow
            if self._k is None:
                if elapsed <= (1.0 + _CHANGE) * interval:
                    return None  # no model yet: only an overrun tells
            elif k_low <= (1.0 + _CHANGE) * self._k:
                return None  # within what the model expects
            last_cut = max(b.batch_time_ms for b in _cut_batches(signals))
            filling = last_cut + interval * max(1, math.floor((now - last_cut) / interval) + 1)
            queued = sum(
                max(0.0, k_low * (self._shape.value(b.records) + b.records)) for b in signals.queued if b.records > 0
            )
            # the running batch may end any moment: the delay of the batch being filled is at least
            delay = max(0.0, now + queued - filling)
            rate = self._size(k_low, alpha, delay)
            if self._k is None:
                # No batch has completed: the overrun may be a one-off (the first job's warm-up)
                # as well as slowness, and nothing tells them apart yet.  Halve the running
                # batch's own rate at most, as TCP halves on a loss; its records are fixed, so
                # further samples of the same batch do not compound the cut.
                rate = max(rate, self._guard(0.5 * n * 1000.0 / interval))
            in_force = (
                signals.rate if signals.rate is not None else (math.inf if self._last_rate is None else self._last_rate)
            )
            if not rate < in_force * (1.0 - _SIGNAL_STEP):
                return None  # not a real cut: leave the rate alone
            return self._published(now, rate)

    def _size(self, k: float, alpha: float, delay: float, trusted: float | None = None) -> float:
        """The rate whose batches fill the interval at speed ``k`` and drain ``delay``, at most
        ``trust_growth`` x the ``trusted`` batch size (the largest recent batch by default)."""
        interval = self.batch_interval_ms
        capacity = self.utilization * interval / k - alpha  # records at the target
        # A queue of a whole interval or more is drained in ``drain_batches`` batches; a
        # shorter one (noise, a slight overrun) gently, at a fifth of it per batch (the
        # PID's integral gain) and never aiming under 96 % of the interval, so that
        # batches stay in the steady band meanwhile.
        if delay >= interval:
            target_ms = self.utilization * interval - delay / self.drain_batches
        else:
            target_ms = max(
                self.utilization * interval - _GENTLE_DRAIN * delay, min(self.utilization, _BAND_FLOOR) * interval
            )
        records = target_ms / k - alpha
        records = max(records, self.floor_fraction * capacity)
        if trusted is None and self._recent:
            trusted = max(self._recent)
        if trusted is not None:
            records = min(records, self.trust_growth * trusted)
        return self._guard(records * 1000.0 / interval)

    def _published(self, now: float, rate: float) -> float:
        """Remember ``rate`` as published at ``now`` (in time order) and return it."""
        i = bisect.bisect_right(self._published_times, now)
        self._published_times.insert(i, now)
        self._published_records.insert(i, rate * self.batch_interval_ms / 1000.0)
        if len(self._published_times) > 256:
            del self._published_times[:128], self._published_records[:128]
        self._last_rate = rate
        return rate

    def _guard(self, rate: float) -> float:
        """Finite and within [min_rate, max_rate], whatever the arithmetic produced."""
        if not math.isfinite(rate):
            rate = self._last_rate if self._last_rate is not None else self.min_rate
        return min(max(rate, self.min_rate), self.max_rate)

    def overhead_records(self, n: float = 1.0) -> float:
        """The learnt shape of the cost (``alpha``, see ``_Overhead``), for metrics and tests."""
        return self._shape.value(n)

    def __repr__(self) -> str:
        return (
            f"AdaptiveRateEstimator(batch_interval_ms={self.batch_interval_ms:g}, "
            f"min_rate={self.min_rate:g}, max_rate={self.max_rate:g}, "
            f"utilization={self.utilization:g}, drain_batches={self.drain_batches:g})"
        )


def adaptive_factory(batch_interval_ms: int, options: Mapping[str, Any] | None = None) -> AdaptiveRateEstimator:
    """``adaptive``: options min_rate, max_rate, utilization, drain_batches, forgetting,
    trust_growth, floor_fraction (numbers or numeric strings; unknown names are an error)."""
    return AdaptiveRateEstimator(batch_interval_ms, **dict(options or {}))
