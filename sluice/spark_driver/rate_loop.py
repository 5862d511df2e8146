"""The rate-control loop on the driver: wiring between the batches, the controllers and the source.

One ``estimators.RateController`` per input stream holds that stream's rate state (the latest
estimate, the rate in force, the last one published); this loop keeps none of its own.  It is
registered as a streaming listener, as Spark's ``JobScheduler.start`` registers each input
stream's controller, and hands each succeeded batch to every controller: a skipped batch's timing
says nothing about throughput.  A controller's ``publish`` is the source's (receiver mode: the
tracker splits the rate among the stream's receivers; direct mode: kept for the next batch's
offset ranges).

``current_rate`` is what the next batch should be bounded by: the latest estimate, else the rate
the tracker remembered from before a restart (unless ``resume`` is off), else ``initial_rate``;
``None`` with no bound.  A remembered rate is what the estimator had learnt, so it wins over
``initial_rate`` by default; the start logs which one won and the setting that turns it around.

With ``slow_start`` (the default) a stream without a remembered rate does not start at
``initial_rate`` but probes up to it (:mod:`~sluice.estimators.slow_start`): the first batch is
small and the rate doubles while batches finish inside the interval, until the estimator answers.
Every rate published, and why, is in ``decisions(stream)`` (plain data, for a UI).

Under ``backpressure.target = "latency"`` each estimator is wrapped
(:mod:`~sluice.estimators.latency`): its rates are scaled so batches take the processing budget
that keeps records under ``target_latency_ms``, and the slow start grows only while batches
finish inside that budget.

An estimator that opts into in-flight signals (``observe``) is also sampled between batches by
one :class:`~sluice.spark_driver.signals.InFlightSampler` thread; for any other (the PID) nothing
is sampled and nothing changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sluice import estimators
from sluice.clock import Clock, SystemClock
from sluice.config_schema import PID_DEFAULTS
from sluice.config_schema.rate_control import check_target
from sluice.estimators.base import RateEstimator
from sluice.estimators.controller import RateController
from sluice.estimators.latency import LatencyTarget, with_target
from sluice.estimators.slow_start import Decision, SlowStart
from sluice.settings import DriverSettings
from sluice.spark_driver import metrics
from sluice.spark_driver.batch import BatchInfo
from sluice.spark_driver.signals import InFlightSampler
from sluice.spark_driver.source import BatchSource, ReportsBacklog

log = logging.getLogger(__name__)

_DEFAULTS = DriverSettings()  # the schema's driver, backpressure and estimator defaults
_MIN_RATE = float(PID_DEFAULTS["min_rate"])


def _min_rate(estimator: RateEstimator) -> float:
    """The estimator's floor (Spark's ``pid.minRate``), the schema's when it has none."""
    rate = getattr(estimator, "min_rate", None)
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else _MIN_RATE


class RateLoop:
    """Per-stream rate controllers, wired to the batches and the source; the rates are theirs.

    :param source: publishes rates (to the tracker) and reports the last published one on restart.
    :param streams: one controller per stream id.
    :param batch_interval_ms: the estimators' batch interval.
    :param estimator: the registered estimator name.
    :param estimator_options: its options.
    :param initial_rate: published before the first batch; 0: none.
    :param enabled: ``False``: no estimator runs and nothing is published.
    :param signal_interval_ms: how often an estimator with ``observe`` gets in-flight signals
        (:mod:`~sluice.spark_driver.signals`); 0: never.
    :param resume: start from the rate the source remembers (``backpressure.resume_rate``);
        ``False``: ``initial_rate`` wins.
    :param slow_start: probe up to ``initial_rate`` before the first estimate
        (``backpressure.slow_start``); ``False``: publish ``initial_rate`` as is.
    :param target: ``backpressure.target``: ``throughput`` (fill the interval) or ``latency``.
    :param target_latency_ms: the latency target's bound on records' end-to-end latency.
    :param block_interval_ms: the receivers' block interval (0 in direct mode), part of a
        record's wait for its batch under the latency target.
    """

    def __init__(
        self,
        source: BatchSource,
        streams: tuple[int, ...],
        *,
        batch_interval_ms: int,
        estimator: str = _DEFAULTS.estimator,
        estimator_options: dict[str, Any] | None = None,
        initial_rate: float = _DEFAULTS.initial_rate,
        enabled: bool = _DEFAULTS.backpressure,
        signal_interval_ms: float = _DEFAULTS.signal_interval_ms,
        resume: bool = _DEFAULTS.resume_rate,
        slow_start: bool = _DEFAULTS.slow_start,
        target: str = _DEFAULTS.target,
        target_latency_ms: int = _DEFAULTS.target_latency_ms,
        block_interval_ms: float = _DEFAULTS.block_interval_ms,
        clock: Clock | None = None,
    ) -> None:
        self.source = source
        self.resume = resume
        self.streams = streams
        self.enabled = enabled
        self.initial_rate = initial_rate
        self.signal_interval_ms = signal_interval_ms
        self.clock: Clock = clock or SystemClock()
        self.sampler: InFlightSampler | None = None
        self.controllers: dict[int, RateController] = {}
        if enabled:
            check_target(target, target_latency_ms, batch_interval_ms, block_interval_ms)
            for stream_id in streams:
                est = estimators.create(estimator, batch_interval_ms, dict(estimator_options or {}))
                est = with_target(est, target, batch_interval_ms, target_latency_ms, block_interval_ms)
                budget_ms = est.budget_ms if isinstance(est, LatencyTarget) else batch_interval_ms
                probe = SlowStart(budget_ms, initial_rate or None, _min_rate(est)) if slow_start else None
                self.controllers[stream_id] = RateController(
                    est, self._publisher(stream_id), stream=str(stream_id), slow_start=probe
                )

    def _publisher(self, stream_id: int) -> Callable[[float], None]:
        """The stream's controller's ``publish``: the source's, with the driver's gauge set first (a
        failure is the controller's to count and log)."""

        def publish(rate: float) -> None:
            metrics.RATE_PUBLISHED.labels(stream=str(stream_id)).set(rate)
            self.source.publish_rate(float(rate), stream_id)

        return publish

    def start(self) -> None:
        """Resume the tracker's last rate (restart), else start the slow start's probe or publish
        ``initial_rate``, before the first batch."""
        if not self.enabled:
            return
        now = self.clock.now_ms()
        for stream_id in self.streams:
            controller = self.controllers[stream_id]
            previous = self.source.latest_published_rate(stream_id)
            if previous is not None and previous <= 0:
                previous = None  # none remembered
            if previous is not None and self.resume:
                log.info(
                    "stream %d: resuming from the last published rate %.1f records/s%s",
                    stream_id,
                    previous,
                    f", not the initial rate {self.initial_rate:g}; set backpressure.resume_rate = false "
                    "(--resume-rate false) to start from the initial rate"
                    if self.initial_rate > 0
                    else "",
                )
                controller.resume(now, previous)
                metrics.RATE_PUBLISHED.labels(stream=str(stream_id)).set(previous)
                continue
            if previous is not None and self.initial_rate > 0:
                log.info(
                    "stream %d: starting from the initial rate %g records/s, not the last published rate "
                    "%.1f (backpressure.resume_rate is false)",
                    stream_id,
                    self.initial_rate,
                    previous,
                )
            probe = controller.begin(now)
            if probe is not None:
                log.info(
                    "stream %d: slow start from %.1f records/s%s",
                    stream_id,
                    probe,
                    f" up to the initial rate {self.initial_rate:g}" if self.initial_rate > 0 else "",
                )
            elif self.initial_rate > 0:
                controller.start_at(now, self.initial_rate)

    def decisions(self, stream_id: int | None = None) -> list[Decision]:
        """The rates published for ``stream_id`` (the first stream by default), oldest first, with
        why each (``reason``): plain data for a UI."""
        if not self.enabled:
            return []
        stream_id = self.streams[0] if stream_id is None else stream_id
        return list(self.controllers[stream_id].decisions)

    def start_sampling(self, batches: Callable[[], list[BatchInfo]], clock: Clock) -> None:
        """Start the one sampling thread if any stream's estimator opted into in-flight signals."""
        if not self.enabled or self.signal_interval_ms <= 0 or self.sampler is not None:
            return
        if not any(c.wants_signals for c in self.controllers.values()):
            return
        self.sampler = InFlightSampler(
            self.controllers,
            batches,
            self.source.backlog if isinstance(self.source, ReportsBacklog) else None,
            clock=clock,
            interval_ms=self.signal_interval_ms,
            rate=self.current_rate,
        )
        self.sampler.start()

    def current_rate(self, stream_id: int | None = None) -> float | None:
        if not self.enabled:
            return None
        stream_id = self.streams[0] if stream_id is None else stream_id
        rate = self.controllers[stream_id].rate_in_force()
        if rate is not None and rate > 0:
            return rate
        return self.initial_rate if self.initial_rate > 0 else None

    def capacity_rate(self, stream_id: int | None = None) -> float | None:
        """The rate a batch of queued blocks may take: :meth:`current_rate`, which under the latency
        target sizes batches to the processing budget, scaled back to the interval it would fill."""
        rate = self.current_rate(stream_id)
        if rate is None:  # backpressure off, or no rate yet
            return rate
        estimator = self.controllers[self.streams[0] if stream_id is None else stream_id].estimator
        if not isinstance(estimator, LatencyTarget):
            return rate
        return rate * estimator.batch_interval_ms / estimator.budget_ms

    # StreamingListener
    def on_batch_completed(self, info: BatchInfo) -> None:
        if not self.enabled or info.status != "succeeded":
            return
        for stream_id, controller in self.controllers.items():
            controller.on_batch_completed(info.for_stream(stream_id))

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        for controller in self.controllers.values():
            try:
                controller.close()
            except Exception:  # a wrapped controller's (the UI's) close is not worth the stop
                log.debug("closing a rate controller failed", exc_info=True)
