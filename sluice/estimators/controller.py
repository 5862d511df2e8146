"""``RateController``: completed batches in, published rates out (Spark's ``RateController``).

The controller is where an estimator's bad day must stop: an estimator that raises, or returns
NaN, infinity, zero or a negative rate, never stops the stream and never reaches ``publish``.
The last good rate stays in force, the failure is counted in
``sluice_estimator_failures_total{stream,reason}`` every time and logged once per reason (a
broken plugin would otherwise write one traceback per batch, forever).

Departures from Spark, on purpose:

* It runs synchronously in the caller's thread (Spark hops to a single "stream-rate-update"
  thread): ``compute`` costs microseconds, and a lock keeps estimates and publishes in order
  when several job threads complete batches.
* ``latest_rate()`` is ``None`` before the first estimate (Spark: -1).
* With a :class:`~sluice.estimators.slow_start.SlowStart`, the rates before the estimator's
  first estimate are a probe that starts small and doubles while batches finish inside the
  interval (Spark trusts ``initialRate`` instead); see that module.
* Every published rate is kept as a :class:`~sluice.estimators.slow_start.Decision` with its
  reason (``decisions``, the last 256), plain data for a UI.
* It holds all of a stream's rate state, so no caller keeps a second copy: the estimator's
  latest answer (``latest_rate``, Spark's ``rateLimit``), the rate in force that bounds the next
  batch (``rate_in_force``: the latest rate handed to ``publish``, a probe, an initial or a
  resumed rate included) and the last rate ``publish`` accepted (``published_rate``).  A failed
  publish leaves the new rate in force, as Spark sets ``rateLimit`` before it publishes: the
  driver bounds its batches by it, the receivers keep ``published_rate`` until a later publish
  succeeds, and the next estimate publishes again.
* ``publish`` is synchronous (the driver's source and the structured admission's tracker and
  rate file all are): a coroutine function is refused when the controller is built, since its
  coroutine would never run.
* Rates are published as floats.  Spark truncates with ``rate.toLong`` before publishing, but
  only the published value: the PID's own state keeps the untruncated rate in both, so the
  sequence of estimates is identical and the published values differ by less than one record/s.
  The rate limiter takes a float anyway, and truncation would turn a legitimate rate below 1
  (a slow source, a plugin) into 0.  ``truncate=True`` restores Spark's behaviour for
  side-by-side comparisons; a rate it truncates to 0 is then rejected as ``zero``.
"""

from __future__ import annotations

import inspect
import logging
import math
import threading
from collections import deque
from collections.abc import Callable
from numbers import Real
from typing import Any, Protocol

from sluice.errors import InvalidArgumentType
from sluice.estimators import metrics
from sluice.estimators.base import InFlight, RateEstimator
from sluice.estimators.slow_start import Decision, SlowStart

log = logging.getLogger(__name__)

__all__ = ["RateController", "CompletedBatch", "FAILURE_REASONS"]

FAILURE_REASONS = ("exception", "not_a_number", "nan", "infinite", "zero", "negative")
_LONG_MAX = 2**63 - 1


def _reason(rate: object) -> str | None:
    """Why ``rate`` cannot be published, or ``None`` if it can."""
    if isinstance(rate, bool) or not isinstance(rate, Real):
        return "not_a_number"
    try:
        value = float(rate)
    except OverflowError:  # an int beyond any float
        return "negative" if rate < 0 else "infinite"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "infinite"
    if value == 0:
        return "zero"
    if value < 0:
        return "negative"
    return None


def _short(value: object) -> str:
    """A log-safe repr: bounded, and never raising (huge ints, a plugin's broken __repr__)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001
        return f"<unprintable {type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


class CompletedBatch(Protocol):
    """What the controller reads of a completed batch (``sluice.spark_driver.batch.BatchInfo`` has
    it); ``None`` where a time is not known, and then the batch is not measured."""

    @property
    def processing_end_ms(self) -> int | None: ...

    @property
    def num_records(self) -> int | None: ...

    @property
    def processing_delay_ms(self) -> int | None: ...

    @property
    def scheduling_delay_ms(self) -> int | None: ...


class RateController:
    """Feeds each completed batch to ``estimator`` and hands good rates to ``publish(rate)``.

    One per input stream: it holds that stream's rate state (module docstring), and a caller that
    needs the rate asks it.

    :param estimator: computes each new rate.
    :param publish: hands a good rate on (to the tracker), synchronously; what it raises is
        counted and logged, never raised to the caller.  ``None``: computed and exported only.
    :param stream: the ``stream`` label of the metrics.
    :param truncate: publish ``int(rate)`` as Spark does (see the module docstring).
    :param slow_start: the probe before the first estimate; ``None``: none (Spark's behaviour).
    """

    DECISIONS_KEPT = 256

    def __init__(
        self,
        estimator: RateEstimator,
        publish: Callable[[float], None] | None,
        *,
        stream: str | int = "0",
        truncate: bool = False,
        slow_start: SlowStart | None = None,
    ) -> None:
        if inspect.iscoroutinefunction(publish):
            raise InvalidArgumentType(
                f"RateController: publish {publish!r} is a coroutine function, whose coroutine would never run; "
                "give a synchronous function of the rate (one that schedules the coroutine itself, if need be)"
            )
        self.estimator = estimator
        self.publish = publish
        self.stream = str(stream)
        self.truncate = truncate
        self.slow_start = slow_start
        self.decisions: deque[Decision] = deque(maxlen=self.DECISIONS_KEPT)
        self._latest: float | None = None  # the estimator's latest good answer
        self._in_force: float | None = None  # the latest rate handed to publish, or resumed
        self._published: float | None = None  # the latest rate publish accepted
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        self._failures: dict[str, int] = {}
        for reason in FAILURE_REASONS:  # every series exists at 0, so alert rules see increases
            metrics.ESTIMATOR_FAILURES.labels(stream=self.stream, reason=reason)
        min_rate = getattr(estimator, "min_rate", None)
        if isinstance(min_rate, (int, float)) and math.isfinite(min_rate):
            metrics.MIN_RATE.labels(stream=self.stream).set(min_rate)

    def latest_rate(self) -> float | None:
        """The estimator's last good rate (records/s), ``None`` before the first estimate."""
        return self._latest

    def rate_in_force(self) -> float | None:
        """The rate the next batch is bounded by: the latest one published (a probe, an initial or a
        resumed rate included), whether or not ``publish`` succeeded; ``None`` before any."""
        return self._in_force

    def published_rate(self) -> float | None:
        """The latest rate ``publish`` accepted (a resumed one counts: the tracker holds it): what the
        receivers run at while publishes fail; ``None`` before any."""
        return self._published

    @property
    def last_decision(self) -> Decision | None:
        """The last rate published and why (``None`` before any)."""
        return self.decisions[-1] if self.decisions else None

    def begin(self, time_ms: float) -> float | None:
        """Publish the slow start's first probe (before the first batch); ``None`` without one."""
        if self.slow_start is None or not self.slow_start.active:
            return None
        with self._lock:
            rate = self.slow_start.rate
            self._publish(rate, time_ms, "slow_start")
            return rate

    def resume(self, time_ms: float, rate: float) -> None:
        """Put ``rate``, the one the tracker remembers from before a restart, in force without
        publishing it again; a remembered rate was measured, not guessed, so the slow start ends."""
        with self._lock:
            if self.slow_start is not None:
                self.slow_start.finish()
            self._in_force = self._published = float(rate)
            self.decisions.append(Decision(float(time_ms), float(rate), "resume"))

    def start_at(self, time_ms: float, rate: float) -> None:
        """Publish the configured initial rate as is (the slow start off, or nothing to probe)."""
        with self._lock:
            self._publish(float(rate), time_ms, "initial")

    @property
    def failures(self) -> dict[str, int]:
        """Rejected estimates of this controller by reason (the metric sums all controllers)."""
        return dict(self._failures)

    def on_batch_completed(self, batch_info: CompletedBatch) -> float | None:
        """Estimate from one completed batch; return the rate published, or ``None``.

        As in Spark, a batch whose end time or delays are unknown is skipped: there is nothing
        to measure.  ``time_ms`` given to the estimator is the processing end time.
        """
        end = batch_info.processing_end_ms
        elements = batch_info.num_records
        processing = batch_info.processing_delay_ms
        scheduling = batch_info.scheduling_delay_ms
        if end is None or elements is None or processing is None or scheduling is None:
            return None
        with self._lock:
            rate = self._answer(lambda: self.estimator.compute(end, elements, processing, scheduling), end)
            probe = self.slow_start
            if probe is None:
                decided = None if rate is None else (rate, "estimate")
            else:
                decided = probe.settle(rate, float(elements or 0), float(processing), float(scheduling))
            if decided is None:
                return None
            self._accept(*decided, end)
            return decided[0]

    @property
    def wants_signals(self) -> bool:
        """Whether the estimator opted into in-flight signals (has ``observe``)."""
        return callable(getattr(self.estimator, "observe", None))

    def on_in_flight(self, signals: InFlight) -> float | None:
        """Hand in-flight signals to an estimator that opted in; publish what it answers (guarded
        exactly as ``compute``'s answers are).  Nothing happens for an estimator without ``observe``."""
        observe = getattr(self.estimator, "observe", None)
        if not callable(observe):
            return None
        with self._lock:
            rate = self._answer(lambda: observe(signals), signals.time_ms)
            if rate is None:
                return None
            if self.slow_start is not None:
                self.slow_start.finish()
            self._accept(rate, "in_flight_cut", signals.time_ms)
            return rate

    def _answer(self, call: Callable[[], Any], time_ms: Any) -> float | None:
        """Run one estimator call under the lock: its rate if good; a bad one is counted and logged."""
        try:
            rate = call()
        except Exception as exc:  # noqa: BLE001 - an estimator never stops the stream
            self._fail("exception", f"raised {type(exc).__name__}: {exc}", time_ms, exc)
            return None
        if rate is None:
            return None
        reason = _reason(rate)
        if reason is None and self.truncate:
            rate = float(min(math.trunc(rate), _LONG_MAX))  # Spark's rate.toLong
            reason = _reason(rate)
        if reason is not None:
            self._fail(reason, f"returned {_short(rate)}", time_ms)
            return None
        return float(rate)

    def _accept(self, rate: float, reason: str, time_ms: Any) -> None:
        """Export and publish a good rate; an estimator's answers (not the probe's) become ``latest_rate``."""
        if reason != "slow_start_grow":
            self._latest = rate
            metrics.ESTIMATED_RATE.labels(stream=self.stream).set(rate)
            metrics.ESTIMATES.labels(stream=self.stream).inc()
            self._export_terms()
        self._publish(rate, time_ms, reason)

    def close(self) -> None:
        """Nothing to release (no thread of its own); here for symmetry with other listeners."""

    def _fail(self, reason: str, what: str, time_ms: Any, exc: BaseException | None = None) -> None:
        self._failures[reason] = self._failures.get(reason, 0) + 1
        metrics.ESTIMATOR_FAILURES.labels(stream=self.stream, reason=reason).inc()
        if reason in self._logged:
            log.debug("stream %s: estimator %r %s (at %s)", self.stream, self.estimator, what, time_ms)
            return
        self._logged.add(reason)
        log.error(
            "stream %s: estimator %r %s (at %s ms); keeping the last good "
            "rate %s. Logged once per kind (%s); every occurrence is counted in "
            "sluice_estimator_failures_total",
            self.stream,
            self.estimator,
            what,
            time_ms,
            self._latest,
            reason,
            exc_info=exc,
        )

    def _export_terms(self) -> None:
        """Set the PID gauges from any estimator exposing ``last_terms`` with those fields."""
        terms = getattr(self.estimator, "last_terms", None)
        if terms is None:
            return
        for gauge, field in (
            (metrics.PID_ERROR, "error"),
            (metrics.PID_HISTORICAL_ERROR, "historical_error"),
            (metrics.PID_DERIVATIVE_ERROR, "d_error"),
            (metrics.PID_PROCESSING_RATE, "processing_rate"),
        ):
            value = getattr(terms, field, None)
            if isinstance(value, Real) and not isinstance(value, bool):
                try:
                    gauge.labels(stream=self.stream).set(float(value))
                except (OverflowError, ValueError):  # a gauge is not worth a failed batch
                    pass

    def _publish(self, rate: float, time_ms: Any, reason: str) -> None:
        """Put ``rate`` in force, keep it as a decision and hand it to ``publish`` (under the lock)."""
        self._in_force = rate
        try:
            self.decisions.append(Decision(float(time_ms), rate, reason))
        except (TypeError, ValueError):  # a plugin's odd time: the decision still counts
            self.decisions.append(Decision(math.nan, rate, reason))
        if self.publish is None:
            return
        try:
            self.publish(rate)
        except Exception as exc:  # noqa: BLE001 - the rate stays in force; the next one publishes again
            self._publish_failed(exc)
            return
        self._published = rate
        self._logged = {key for key in self._logged if not key.startswith("publish:")}  # the next outage is logged

    def _publish_failed(self, exc: BaseException) -> None:
        metrics.PUBLISH_FAILURES.labels(stream=self.stream).inc()
        key = "publish:" + type(exc).__name__
        if key in self._logged:
            log.debug("stream %s: publishing the rate failed: %s", self.stream, exc)
            return
        self._logged.add(key)
        log.error(
            "stream %s: publishing the rate %s failed (logged once per exception type until a publish "
            "succeeds, counted in sluice_rate_publish_failures_total); the receivers keep %s: %s",
            self.stream,
            self._in_force,
            self._published,
            exc,
            # the tracker away is one line, not a traceback; anything else may be a bug
            exc_info=None if isinstance(exc, ConnectionError) else exc,
        )
