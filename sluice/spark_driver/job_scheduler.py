"""Runs batch jobs on a pool of threads and times them (Spark's ``JobScheduler`` + ``JobSet``).

PySpark jobs block the calling Python thread until the JVM is done, so ``concurrent_jobs`` threads
("streaming-job-executor") run batches, as Spark's fixed pool does.  Each batch is one job: the
user's function.  Timing follows ``JobSet``: submission when the batch is handed over, processing
start when a thread picks it up, processing end when the function returned (retries included).

Listeners see ``on_batch_submitted``/``on_batch_started``/``on_batch_completed`` like
``StreamingListener``; the rate controller and the metrics are listeners.  A failed batch is
retried ``max_batch_retries`` times; then ``on_batch_failure="stop"`` hands a
:class:`BatchFailedError` to the driver (which stops, and the batch stays pending at the source so
a restart re-runs it) and ``"skip"`` acknowledges the batch as skipped and goes on.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from sluice.clock import Clock
from sluice.config import key
from sluice.errors import InvalidArgument, InvalidState, SluiceError
from sluice.settings import DriverSettings
from sluice.spark_driver import metrics
from sluice.spark_driver.batch import Batch, BatchInfo
from sluice.spark_driver.completion_recorder import CompletionRecorder
from sluice.spark_driver.source import BatchSource
from sluice.stages import now_ms, stage_percentiles

log = logging.getLogger(__name__)

_DEFAULTS = DriverSettings()  # the schema's driver, backpressure and estimator defaults

BatchFunction = Callable[[Batch], Any]
FAILURE_POLICIES = key("driver.on_batch_failure").choices  # stop, skip: named once, in the schema


class StreamingListener(Protocol):
    """Spark's ``StreamingListener``, reduced to batch events; every method is optional.

    ``on_batch_generated`` gets the :class:`Batch` itself (its blocks), just before it is submitted."""

    def on_batch_generated(self, batch: Batch) -> None: ...

    def on_batch_submitted(self, info: BatchInfo) -> None: ...

    def on_batch_started(self, info: BatchInfo) -> None: ...

    def on_batch_completed(self, info: BatchInfo) -> None: ...


_PY_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)): (.+)$", re.MULTILINE)


def describe_error(error: BaseException) -> str:
    """``Name: message`` of the root Python error, digging through Spark's wrapped tracebacks.

    A task's exception reaches the driver as a ``PythonException``/``Py4JJavaError`` whose text holds
    the worker's whole traceback and Java frames; the user wants the worker's last Python error.
    """
    text = str(error)
    if "Traceback (most recent call last)" not in text:
        first = text.strip().splitlines()[0] if text.strip() else ""
        return f"{type(error).__name__}: {first}" if first else type(error).__name__
    head = text.split("\n\tat ", 1)[0]
    matches = [
        m for m in _PY_ERROR_LINE.finditer(head) if not m.group(1).startswith(("org.", "java.", "py4j.", "scala."))
    ]
    if not matches:
        return f"{type(error).__name__}: {text.strip().splitlines()[0]}"
    name, message = matches[-1].group(1), matches[-1].group(2)
    return f"{name.rsplit('.', 1)[-1]}: {message.strip()}"


class BatchFailedError(SluiceError, RuntimeError):
    """A batch failed after all its retries under ``on_batch_failure="stop"``."""

    def __init__(self, batch_time_ms: int, attempts: int, cause: BaseException, advice: str | None = None) -> None:
        super().__init__(
            f"batch {batch_time_ms} failed after {attempts} attempt(s): {describe_error(cause)}"
            + (f"; {advice}" if advice else "")
        )
        self.batch_time_ms = batch_time_ms
        self.attempts = attempts
        self.cause = cause


@dataclass
class JobHandle:
    """A submitted batch; ``done`` is set once it completed, failed or was cancelled."""

    batch: Batch
    info: BatchInfo
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def job_group(self) -> str:
        return f"sluice-batch-{self.batch.time_ms}"


class MetricsListener:
    """Feeds the batch histograms and counters from listener events."""

    def on_batch_completed(self, info: BatchInfo) -> None:
        if info.processing_delay_ms is not None:
            metrics.BATCH_PROCESSING.observe(info.processing_delay_ms / 1000.0)
        if info.scheduling_delay_ms is not None:
            metrics.BATCH_SCHEDULING_DELAY.observe(info.scheduling_delay_ms / 1000.0)
        if info.total_delay_ms is not None:
            metrics.BATCH_TOTAL_DELAY.observe(info.total_delay_ms / 1000.0)
        metrics.BATCH_RECORDS.set(info.num_records)
        if info.status == "succeeded":
            metrics.BATCHES_COMPLETED.inc()
            metrics.RECORDS_PROCESSED.inc(info.num_records)
        else:
            metrics.BATCHES_FAILED.inc()


def check_settings(concurrent_jobs: int, max_batch_retries: int, on_batch_failure: str) -> None:
    """Raise ``ValueError`` naming the first scheduler setting that is not allowed."""
    if concurrent_jobs < 1:
        raise InvalidArgument(f"concurrent_jobs must be at least 1, got {concurrent_jobs}")
    if max_batch_retries < 0:
        raise InvalidArgument(f"max_batch_retries must be 0 or more, got {max_batch_retries}")
    if on_batch_failure not in FAILURE_POLICIES:
        raise InvalidArgument(
            f"on_batch_failure must be one of {', '.join(FAILURE_POLICIES)}, got {on_batch_failure!r}"
        )


class JobScheduler:
    """Queues batches and runs the user's function on them, ``concurrent_jobs`` at a time.

    :param fn: the user's batch function.
    :param source: told when a batch completed (the tracker, or the direct checkpoint).
    :param clock: stamps submission, start and end times.
    :param concurrent_jobs: job threads (``spark.streaming.concurrentJobs``).
    :param max_batch_retries: retries of a failed batch.
    :param on_batch_failure: after the retries: ``stop`` (``on_fatal`` gets a :class:`BatchFailedError`)
        or ``skip``.
    :param on_fatal: called with the error that stops the stream.
    """

    def __init__(
        self,
        fn: BatchFunction,
        source: BatchSource,
        *,
        clock: Clock,
        concurrent_jobs: int = _DEFAULTS.concurrent_jobs,
        max_batch_retries: int = _DEFAULTS.max_batch_retries,
        on_batch_failure: str = _DEFAULTS.on_batch_failure,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        check_settings(concurrent_jobs, max_batch_retries, on_batch_failure)
        self.fn = fn
        self.source = source
        self.completions = CompletionRecorder(source)
        self.clock = clock
        self.concurrent_jobs = concurrent_jobs
        self.max_batch_retries = max_batch_retries
        self.on_batch_failure = on_batch_failure
        self.on_fatal = on_fatal
        self.listeners: list[Any] = [MetricsListener()]
        self._pool = ThreadPoolExecutor(concurrent_jobs, thread_name_prefix="streaming-job-executor")
        self._lock = threading.Condition()
        self._pending: dict[int, JobHandle] = {}
        self._running: set[int] = set()
        self._cancelled = False

    def add_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def in_flight(self) -> list[BatchInfo]:
        """Batches submitted and not completed, oldest first; a running one has its
        ``processing_start_ms``.  A copy taken under the lock: cheap, no I/O, safe from any thread."""
        with self._lock:
            return [self._pending[t].info for t in sorted(self._pending)]

    def submit(self, batch: Batch) -> JobHandle:
        """Queue ``batch``; listeners see it submitted now (Spark: ``BatchSubmitted``)."""
        # Receiver mode reports no ranges, as Spark's receiver input does: the tracker logged them with
        # the allocation, and a batch of 10,000 blocks would build and send them all again.
        ranges = () if batch.blocks else tuple(batch.offset_ranges)
        info = BatchInfo(
            batch.time_ms,
            batch.num_records,
            submission_time_ms=int(self.clock.now_ms()),
            stream_records=dict(batch.stream_records),
            offset_ranges=ranges,
        )
        batch.stamps.submitted = now_ms()
        handle = JobHandle(batch, info)
        with self._lock:
            if self._cancelled:
                raise InvalidState(f"batch {batch.time_ms} submitted after the job scheduler stopped")
            self._pending[batch.time_ms] = handle
            metrics.BATCHES_PENDING.set(len(self._pending))
        self._post("on_batch_generated", batch)  # the batch itself, for listeners that show its blocks
        self._post("on_batch_submitted", info)
        self._pool.submit(self._run, handle)
        return handle

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no batch is pending; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._pending, timeout)

    def stop(self, graceful: bool = True, timeout: float | None = None) -> int:
        """Graceful: run every queued batch (within ``timeout``).  Otherwise, or past it, cancel
        queued batches and running Spark jobs (they stay pending at the source, so a restart re-runs
        them); returns how many were cancelled."""
        if graceful:
            self.wait_idle(timeout)
        with self._lock:
            self._cancelled = True
            abandoned = len(self._pending)
            running = [self._pending[t] for t in self._running if t in self._pending]
        for handle in running:
            try:
                handle.batch.spark.sparkContext.cancelJobGroup(handle.job_group)
            except Exception:  # the context may already be gone
                log.debug("could not cancel job group %s", handle.job_group, exc_info=True)
        self._pool.shutdown(wait=False, cancel_futures=True)  # a batch past the timeout must not hold the stop
        with self._lock:
            # Cancelled jobs return soon; wait for them so nothing reports to a stopped source.
            self._lock.wait_for(lambda: not self._running, 10.0 if timeout is None else timeout)
            for handle in self._pending.values():
                handle.done.set()
        if self.completions.unrecorded:
            self.completions.flush()
        return abandoned

    # -- the job thread ------------------------------------------------------------------------

    def _run(self, handle: JobHandle) -> None:
        batch = handle.batch
        with self._lock:
            if self._cancelled:
                self._finish(handle, None)
                return
            self._running.add(batch.time_ms)
        batch.stamps.started = now_ms()
        handle.info = handle.info.with_(processing_start_ms=int(self.clock.now_ms()), status="running")
        self._post("on_batch_started", handle.info)
        error: BaseException | None = None
        attempts = 0
        while True:
            attempts += 1
            try:
                self._set_job_group(handle)
                self.fn(batch)
                error = None
                break
            except Exception as exc:  # noqa: BLE001 - the user's function may raise anything
                error = exc
                if attempts > self.max_batch_retries or self._cancelled:
                    break
                metrics.BATCH_RETRIES.inc()
                log.warning("batch %d attempt %d failed, retrying: %s", batch.time_ms, attempts, describe_error(exc))
        end = int(self.clock.now_ms())
        batch.stamps.function_end = now_ms()
        if error is None:
            status, failure = "succeeded", None
        else:
            status = "skipped" if self.on_batch_failure == "skip" else "failed"
            failure = describe_error(error)
        if self._cancelled and error is not None:
            # Stopping: a job cancelled under it is not a failure of the batch; it stays pending.
            self._finish(handle, None)
            return
        stages = self._stages(batch) if error is None else {}
        handle.info = handle.info.with_(
            processing_end_ms=end,
            status=status,
            attempts=attempts,
            failure=failure,
            stages=stages,
            outputs=tuple(batch.outputs),
        )
        if status == "skipped":
            log.error("batch %d skipped after %d attempt(s): %s", batch.time_ms, attempts, failure)
        if status in ("succeeded", "skipped"):
            self.completions.record(batch, handle.info)
        self._post("on_batch_completed", handle.info)
        fatal = None
        if error is not None and status == "failed":
            fatal = BatchFailedError(batch.time_ms, attempts, error, self._advice(batch, error))
        self._finish(handle, fatal)

    @staticmethod
    def _stages(batch: Batch) -> dict[str, dict[str, float]]:
        """The batch's per-stage p50/p99 (:mod:`sluice.stages`), each sample observed in
        ``sluice_batch_stage_seconds``; a batch whose stamps cannot be read gets none."""
        try:
            samples = batch.stage_samples()
        except Exception:  # timing never fails a batch
            log.debug("batch %d: no stage times", batch.time_ms, exc_info=True)
            return {}
        metrics.observe_stages(samples)
        return stage_percentiles(samples)

    def _advice(self, batch: Batch, error: BaseException) -> str | None:
        """What the operator can do about a failed batch, when the source knows (a block to skip);
        never in the way of the stop itself."""
        explain = getattr(self.source, "explain_failure", None)
        try:
            return explain(batch, error) if explain is not None else None
        except Exception:  # the stop goes on without advice
            log.exception("batch %d: the source could not explain the failure", batch.time_ms)
            return None

    def _finish(self, handle: JobHandle, fatal: BaseException | None) -> None:
        with self._lock:
            self._pending.pop(handle.batch.time_ms, None)
            self._running.discard(handle.batch.time_ms)
            metrics.BATCHES_PENDING.set(len(self._pending))
            self._lock.notify_all()
        handle.done.set()
        if fatal is not None:
            log.error("%s", fatal)
            if self.on_fatal is not None:
                self.on_fatal(fatal)

    @staticmethod
    def _set_job_group(handle: JobHandle) -> None:
        handle.batch.spark.sparkContext.setJobGroup(
            handle.job_group, f"Sluice batch {handle.batch.time_ms}", interruptOnCancel=True
        )

    def _post(self, event: str, info: BatchInfo | Batch) -> None:
        for listener in list(self.listeners):
            method = getattr(listener, event, None)
            if method is None:
                continue
            try:
                method(info)
            except Exception:  # a listener never breaks the stream
                time_ms = info.time_ms if isinstance(info, Batch) else info.batch_time_ms
                log.exception("listener %r failed on %s for batch %d", listener, event, time_ms)
