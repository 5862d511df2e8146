"""``StreamingDriver``: Spark's ``StreamingContext`` for Sluice.

It wires the parts together: a :class:`~sluice.spark_driver.source.BatchSource` (the tracker by default),
a :class:`~sluice.spark_driver.job_generator.JobGenerator` on the trigger's timer, a
:class:`~sluice.spark_driver.job_scheduler.JobScheduler` running the user's function, and the
:class:`~sluice.spark_driver.rate_loop.RateLoop` closing the backpressure loop.  Usage::

    driver = StreamingDriver(spark, tracker="127.0.0.1:7100", batch_interval_ms=1000, initial_rate=5000)
    driver.foreach_batch(lambda batch: batch.write_json("/data/out"))
    driver.start()
    driver.await_termination()

Start order matters for exactly-once and for bounded first batches: the source starts; the rate
loop resumes the tracker's last rate or publishes ``initial_rate``; the batches allocated before a
restart are re-run in order; only then does the timer generate new batches.

``stop`` may come from any thread at any time, while ``start`` still waits for the tracker
included: the source is closed under it and ``start`` returns with the driver stopped.  From the
moment a stop begins, tracker calls stop waiting for a lost connection (the source's optional
``stop_waiting``), so an outage cannot hold a stop; ``timeout`` bounds the rest.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from sluice.clock import Clock, SystemClock
from sluice.errors import InvalidArgument, InvalidArgumentType, InvalidState
from sluice.settings import DriverSettings, with_overrides
from sluice.spark_driver import triggers
from sluice.spark_driver.batch import Batch
from sluice.spark_driver.job_generator import JobGenerator
from sluice.spark_driver.job_scheduler import JobScheduler, check_settings
from sluice.spark_driver.rate_loop import RateLoop
from sluice.spark_driver.source import BatchSource, KnowsLastBatchTime, SourceContext, StopsWaiting

log = logging.getLogger(__name__)


class StreamingDriver:
    """Runs ``fn(batch)`` on every batch of the source, under a trigger, with backpressure.

    Stopping it from your own script: :meth:`stop` may be called from any thread (it blocks until
    the driver has stopped; ``graceful=False`` abandons queued batches, a restart re-runs them), and
    :meth:`await_termination` with a timeout returns ``False`` while the driver runs, so the main
    thread can wait in short steps and still run a signal handler (Python runs handlers on the main
    thread between steps).  A handler must not call :meth:`stop` itself, since a graceful stop waits
    for the last batch; it hands the stop to a thread::

        driver.start()
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=driver.stop).start())
        while not driver.await_termination(timeout=1.0):
            pass  # or other work of the script

    :param spark: the SparkSession; ``None``: one is built for ``settings.master`` (and stopped with
        the driver).
    :param tracker: the tracker's ``HOST:PORT`` (receiver mode, when no ``source`` is given).
    :param settings: the batch interval, trigger, estimator, backpressure, concurrency and failure
        policy (:class:`~sluice.settings.DriverSettings`); default the schema's.
    :param estimator_options: the estimator's options.
    :param clock: the job generator's clock (a ``ManualClock`` in tests).
    :param source: where batches come from; default the tracker at ``tracker``.
    :param streams: the stream ids whose blocks form a batch.
    :param block_store: the block store URL tasks read from; default the one each location names.
    :param auth_token: sent to the tracker.
    :param app_name: the Spark application name when the driver builds the session.
    :param options: configuration sections handed to the source (``SourceContext.options``).
    :param block_store_options: the ``[block_store.options]`` table: the storage options of a non-file
        store, sent to the tasks with each block RDD.
    :param overrides: fields of ``settings`` given one by one (``batch_interval_ms=500``).
    """

    def __init__(
        self,
        spark: Any = None,
        *,
        tracker: str | None = None,
        settings: DriverSettings | None = None,
        estimator_options: dict[str, Any] | None = None,
        clock: Clock | None = None,
        source: BatchSource | None = None,
        streams: tuple[int, ...] = (0,),
        block_store: str | None = None,
        auth_token: str | None = None,
        app_name: str = "sluice-driver",
        options: dict[str, Any] | None = None,
        block_store_options: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> None:
        s = with_overrides(settings or DriverSettings(), overrides, "StreamingDriver")
        if s.batch_interval_ms <= 0:
            raise InvalidArgument(f"batch_interval_ms must be above 0, got {s.batch_interval_ms}")
        if s.initial_rate < 0:
            raise InvalidArgument(f"initial_rate must be 0 (none) or more, got {s.initial_rate}")
        # the tracker's client loads only when no source is given (direct mode passes its own)
        from sluice.spark_driver.receiver_source import ReceiverSource

        if source is None:
            if tracker is None:
                raise InvalidArgument("StreamingDriver needs a tracker address (HOST:PORT) or a source")
            source = ReceiverSource(
                tracker,
                auth_token=auth_token,
                block_store=block_store,
                block_store_options=block_store_options,
                on_refused=s.on_batch_failure,
                bad_records=s.bad_records,
                dead_letter=s.dead_letter,
                max_partitions=s.max_batch_partitions,
                min_partitions=s.min_batch_partitions,
            )
        self.settings = s
        self.trigger = triggers.create(s.trigger, s.batch_interval_ms)  # validates the name early
        self.clock: Clock = clock or SystemClock()
        self.streams = tuple(streams)
        # Before Spark starts, so a bad estimator option or latency target stops nothing but this.
        self.rate_loop = RateLoop(
            source,
            self.streams,
            batch_interval_ms=s.batch_interval_ms,
            estimator=s.estimator,
            estimator_options=estimator_options,
            initial_rate=s.initial_rate,
            enabled=s.backpressure,
            signal_interval_ms=s.signal_interval_ms,
            resume=s.resume_rate,
            slow_start=s.slow_start,
            target=s.target,
            target_latency_ms=s.target_latency_ms,
            block_interval_ms=s.block_interval_ms if isinstance(source, ReceiverSource) else 0.0,
            clock=self.clock,
        )
        self._own_spark = spark is None
        if spark is None:
            # pyspark loads only when the driver makes its own session
            from pyspark.sql import SparkSession

            # Spark's Python workers must run this interpreter (the one with Sluice installed),
            # not whatever python3 is first on PATH when the venv is not activated.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

            spark = (
                SparkSession.builder.master(s.master)
                .appName(app_name)
                .config("spark.ui.showConsoleProgress", "false")
                .getOrCreate()
            )
        self.spark = spark
        self.batch_interval_ms = s.batch_interval_ms
        self.options = dict(options or {})
        self.source: BatchSource = source
        check_settings(s.concurrent_jobs, s.max_batch_retries, s.on_batch_failure)  # now, not at start()
        self._fn: Callable[[Batch], Any] | None = None
        self.scheduler: JobScheduler | None = None
        self.generator: JobGenerator | None = None
        self._listeners: list[Any] = []
        self._state = "initialized"
        self._state_lock = threading.Lock()
        self._terminated = threading.Event()
        self._error: BaseException | None = None
        self.abandoned_batches = 0  # batches a stop cancelled (still pending at the source)

    # -- user API ------------------------------------------------------------------------------

    def foreach_batch(self, fn: Callable[[Batch], Any]) -> StreamingDriver:
        """Register the function run on every batch (Spark's ``foreachRDD``/``foreachBatch``)."""
        if not callable(fn):
            raise InvalidArgumentType(f"foreach_batch needs a callable taking a Batch, got {type(fn).__name__}")
        self._fn = fn
        return self

    def add_listener(self, listener: Any) -> None:
        """A ``StreamingListener``-like object (``on_batch_submitted/started/completed``)."""
        self._listeners.append(listener)
        if self.scheduler is not None:
            self.scheduler.add_listener(listener)

    @property
    def state(self) -> str:
        return self._state

    def start(self) -> None:
        """Start the source, resume or publish the rate, re-run pending batches, start the timer."""
        with self._state_lock:
            if self._state != "initialized":
                raise InvalidState(f"StreamingDriver.start: the driver is {self._state}; start it only once")
            if self._fn is None:
                raise InvalidState("StreamingDriver.start: register a function with foreach_batch first")
            self._state = "starting"
        try:
            self.source.start(
                SourceContext(
                    self.spark,
                    self.batch_interval_ms,
                    self.streams,
                    self.options,
                    self.trigger.name,
                    self.rate_loop.current_rate,
                    self.rate_loop.capacity_rate,
                )
            )
            self.rate_loop.start()
            recovered = self.source.recover()
        except BaseException:
            stopping = self._state == "stopping"
            self._release("before it started")
            if stopping:  # stop() closed the source under us: not a failure
                return
            raise
        with self._state_lock:
            stopping = self._state == "stopping"
            if not stopping:
                self._begin(recovered)
                self._state = "active"
        if stopping:
            self._release("before it started")
            return
        log.info(
            "streaming driver started: trigger %s, batch interval %d ms", self.trigger.name, self.batch_interval_ms
        )

    def _begin(self, recovered: list[int]) -> None:
        assert self._fn is not None
        s = self.settings
        self.scheduler = JobScheduler(
            self._fn,
            self.source,
            clock=self.clock,
            concurrent_jobs=s.concurrent_jobs,
            max_batch_retries=s.max_batch_retries,
            on_batch_failure=s.on_batch_failure,
            on_fatal=self._fatal,
        )
        self.scheduler.add_listener(self.rate_loop)
        self.rate_loop.start_sampling(self.scheduler.in_flight, self.clock)
        for listener in self._listeners:
            self.scheduler.add_listener(listener)
        self.generator = JobGenerator(
            self.source,
            self.scheduler,
            self.trigger,
            clock=self.clock,
            rate=self.rate_loop.current_rate,
            on_finished=self._finished,
            on_fatal=self._fatal,
        )
        if recovered:
            log.info("re-running %d batch(es) allocated before the restart: %s", len(recovered), recovered)
        last_batch_time = self.source.last_batch_time() if isinstance(self.source, KnowsLastBatchTime) else None
        self.generator.start(recovered, last_batch_time)

    def await_termination(self, timeout: float | None = None) -> bool:
        """Block until stopped (True) or ``timeout`` seconds passed (False); re-raise a fatal error."""
        done = self._terminated.wait(timeout)
        if self._error is not None:
            raise self._error
        return done

    def stop(self, graceful: bool = True, timeout: float | None = None, stop_spark: bool | None = None) -> None:
        """Stop.  Graceful: one last batch (bounded by the rate like the others), and every queued
        batch runs, within ``timeout`` seconds (``None``: no limit); past it, or when not graceful,
        queued and running batches are abandoned (a restart re-runs them; ``abandoned_batches``
        counts them).  A stop while :meth:`start` waits for the tracker ends that wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._state_lock:
            state = self._state
            if state not in ("stopping", "stopped"):
                self._state = "stopping"
        if state == "starting":
            self.source.stop()  # start() is waiting on it: it ends now and releases the rest
        if state in ("starting", "stopping", "stopped"):
            self._terminated.wait(timeout)
            return
        if state == "initialized":
            self._release("before it started", stop_spark)
            return
        if isinstance(self.source, StopsWaiting):
            self.source.stop_waiting()
        try:
            if self.generator is not None:
                default = max(10 * self.batch_interval_ms / 1000.0, 10.0)
                self.generator.stop(graceful=graceful, timeout=default if deadline is None else _left(deadline))
                log.info("job generator stopped after batch %s", self.generator.last_batch_time_ms)
            if self.scheduler is not None:
                self.abandoned_batches = self.scheduler.stop(graceful=graceful, timeout=_left(deadline))
                if self.abandoned_batches:
                    log.warning(
                        "%d batch(es) abandoned by the stop; they stay pending and a restart re-runs them",
                        self.abandoned_batches,
                    )
                log.info("job scheduler stopped")
        finally:
            self._release("graceful" if graceful and not self.abandoned_batches else "immediately", stop_spark)

    def _release(self, how: str, stop_spark: bool | None = None) -> None:
        """Close the rate loop and the source, stop Spark if the driver built it; stopped."""
        try:
            self.rate_loop.close()
            self.source.stop()
            log.info("source stopped")
            if stop_spark if stop_spark is not None else self._own_spark:
                self.spark.stop()
        finally:
            self._state = "stopped"
            self._terminated.set()
            log.info("streaming driver stopped (%s)", how)

    # -- internal ------------------------------------------------------------------------------

    def _stop_in_background(self, graceful: bool) -> None:
        threading.Thread(
            target=self.stop, kwargs={"graceful": graceful}, name="StreamingDriver-stop", daemon=True
        ).start()

    def _finished(self) -> None:
        """A finite trigger (once, available-now) generated its last batch."""
        self._stop_in_background(graceful=True)

    def _fatal(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._stop_in_background(graceful=False)


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (never below 0); ``None`` without one."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
