"""The real pipelines ``bench/control.py`` drives, one run at a time, and what each run records.

A run is one estimator on one scenario: a workload offered to a receiver (lines from a socket,
``control_workload.LineServer``, or a Kafka topic with a backlog), a batch function whose cost
per record is known and changes when the scenario says so, and a recorder of every batch the
system reports.

* Sluice: a ``sluice-tracker`` and a ``sluice-receiver`` process (socket or Kafka source), the
  ``StreamingDriver`` on the bench's Spark session with the estimator under test.
* Spark: Spark's own receiver (``StreamingContext.socketTextStream``) with
  ``spark.streaming.backpressure.enabled`` (its PID) on the same session, the same socket
  workload and the same batch function.

The batch function's work is a sleep of the scenario's cost for the batch's records (what makes
capacity known and the same for both systems); it reads the current speed from a
:class:`CapacityFlag` when the batch starts, which a timer thread moves along the scenario's
profile: the function does not know the schedule, as a real job does not know its neighbours.
Neither runs a Spark job: Sluice's batch knows its records, Spark's function reads them from the
``BatchSubmitted`` event its listener got before the job started (a JVM ``count`` if it did not).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from control_workload import CapacityFlag, LineServer, Workload, wall_ms

from sluice.embedded import receiver_argv, start_service, start_tracker, stop_process


@dataclass
class RealBatch:
    """One completed batch as the system reported it, times in ms from the run's origin."""

    batch_ms: float
    records: int
    start_ms: float
    processing_ms: float
    scheduling_ms: float
    slept_ms: float
    speed: float
    block_age_ms: float | None = None  # batch time - end of its oldest block (Sluice: time waited at the tracker)


@dataclass
class Run:
    """Everything one run recorded."""

    estimator: str
    origin_ms: float = 0.0
    batches: list[RealBatch] = field(default_factory=list)
    unfinished_delays_ms: list[float] = field(default_factory=list)  # queued at the end, so far
    publishes: list[tuple[float, float]] = field(default_factory=list)
    seconds: float = 0.0
    load: float = 0.0


class Pending:
    """Batches submitted and not completed, from listener events (any thread): at the end of a
    run their scheduling delay so far counts too, or a run could hide a queue by ending."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: dict[int, float] = {}  # batch ms -> submission ms
        self._running: dict[int, float] = {}  # batch ms -> scheduling delay ms

    def submitted(self, batch_ms: int, submission_ms: float) -> None:
        with self._lock:
            self._queued[batch_ms] = submission_ms

    def started(self, batch_ms: int, scheduling_ms: float | None) -> None:
        with self._lock:
            self._queued.pop(batch_ms, None)
            self._running[batch_ms] = float(scheduling_ms or 0.0)

    def completed(self, batch_ms: int) -> None:
        with self._lock:
            self._queued.pop(batch_ms, None)
            self._running.pop(batch_ms, None)

    def delays(self, now_ms: float) -> list[float]:
        with self._lock:
            return [now_ms - t for t in self._queued.values()] + list(self._running.values())


class RecordCounts:
    """Spark's batch records as its listener announced them at submission (posted before the job
    runs), so its batch function knows them without a Spark job, as Sluice's does."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._counts: dict[int, int] = {}

    def put(self, batch_ms: int, count: int) -> None:
        with self._cond:
            self._counts[batch_ms] = count
            self._cond.notify_all()

    def get(self, batch_ms: int, timeout: float = 1.0) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: batch_ms in self._counts, timeout)
            return self._counts.pop(batch_ms, None)


class BatchFunction:
    """The scenario's cost for a batch's records, slept; remembers speed and sleep per batch time."""

    def __init__(self, workload: Workload, flag: CapacityFlag) -> None:
        self.workload = workload
        self.flag = flag
        self.done: dict[int, tuple[float, float]] = {}  # batch ms -> (speed, slept ms)
        self.block_age: dict[int, float] = {}  # batch ms -> age of its oldest block (ms)

    def __call__(self, batch_ms: int, records: int) -> None:
        speed = self.flag.speed
        slept = self.workload.work_ms(records) / speed
        time.sleep(slept / 1000.0)
        self.done[batch_ms] = (speed, slept)


@dataclass(frozen=True)
class Setup:
    """One run's settings, from the scenario (see ``bench/control.py``)."""

    interval_ms: int
    block_ms: int
    seconds: float
    offered: float  # lines/s the socket offers (ignored for Kafka)
    initial_rate: float  # 0: none
    workload: Workload
    profile: Callable[[float], float]
    kafka: tuple[str, str] | None = None  # (bootstrap, topic) for the Kafka source


def _finish(run: Run, infos: list[Any], fn: BatchFunction, origin: float) -> None:
    """Turn the system's batch infos (batch ms, records, start, processing, scheduling) into rows."""
    run.origin_ms = origin
    for batch_ms, records, start_ms, processing, scheduling in infos:
        if start_ms < origin:
            continue  # a batch before the source connected
        speed, slept = fn.done.get(batch_ms, (fn.flag.speed, 0.0))
        run.batches.append(
            RealBatch(
                batch_ms - origin,
                records,
                start_ms - origin,
                processing,
                scheduling,
                slept,
                speed,
                fn.block_age.get(batch_ms),
            )
        )
    run.batches.sort(key=lambda b: b.batch_ms)


def _load() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


def run_sluice(spark: Any, setup: Setup, estimator: str, tmp: Path) -> Run:
    """One run of Sluice's pipeline with ``estimator`` (real tracker and receiver processes)."""
    from sluice.spark_driver import StreamingDriver

    tmp.mkdir(parents=True, exist_ok=True)
    run, flag = Run(estimator, load=_load()), CapacityFlag(setup.profile)
    fn = BatchFunction(setup.workload, flag)
    infos: list[tuple] = []
    pending = Pending()

    class Listener:
        def on_batch_submitted(self, info) -> None:
            pending.submitted(info.batch_time_ms, info.submission_time_ms)

        def on_batch_started(self, info) -> None:
            pending.started(info.batch_time_ms, info.scheduling_delay_ms)

        def on_batch_completed(self, info) -> None:
            pending.completed(info.batch_time_ms)
            if info.processing_delay_ms is not None:
                infos.append(
                    (
                        info.batch_time_ms,
                        info.num_records,
                        info.processing_start_ms,
                        info.processing_delay_ms,
                        info.scheduling_delay_ms,
                    )
                )

    tracker = start_tracker(tmp / "wal", args=["--no-fsync"], block_store=(tmp / "blocks").as_uri())
    server = LineServer(setup.offered) if setup.kafka is None else None
    driver = StreamingDriver(
        spark,
        tracker=tracker.address,
        batch_interval_ms=setup.interval_ms,
        estimator=estimator,
        initial_rate=setup.initial_rate,
        signal_interval_ms=setup.block_ms,
    )
    publish = driver.source.publish_rate

    def recording_publish(rate: float, stream_id: int = 0) -> None:
        run.publishes.append((wall_ms(), float(rate)))
        publish(rate, stream_id)

    driver.source.publish_rate = recording_publish  # type: ignore[method-assign]
    driver.add_listener(Listener())

    def sluice_fn(batch: Any) -> None:
        ends = [start + setup.block_ms for start in map(_block_start, batch.blocks) if start is not None]
        if ends:
            fn.block_age[batch.time_ms] = batch.time_ms - min(ends)
        fn(batch.time_ms, batch.num_records)

    driver.foreach_batch(sluice_fn).start()
    bootstrap: str | None = None
    topic: str | None = None
    group: str | None = None
    if server is not None:
        source, extra = "socket", ["--socket-port", str(server.port)]
    else:
        bootstrap, topic = setup.kafka  # type: ignore[misc]
        source, extra, group = "kafka", [], f"g-{estimator}-{time.time_ns()}"
    if setup.initial_rate > 0:
        extra += ["--initial-rate", str(setup.initial_rate)]  # receivers apply it from their start
    receiver = start_service(
        receiver_argv(
            tracker.address,
            source=source,
            bootstrap=bootstrap,
            topic=topic,
            group=group,
            block_store=(tmp / "blocks").as_uri(),
            block_interval_ms=setup.block_ms,
            receiver_id="bench",
            extra=extra,
        ),
        log=tmp / "receiver.log",
    )
    started = time.monotonic()
    try:
        origin = _wait_for_origin(server, infos, receiver, tmp / "receiver.log")
        flag.start(origin)
        time.sleep(max(0.0, setup.seconds - (wall_ms() - origin) / 1000.0))
        run.unfinished_delays_ms = pending.delays(wall_ms())
    finally:
        driver.stop(graceful=False)
        flag.stop()
        stop_process(receiver)
        tracker.stop()
        if server is not None:
            server.stop()
    run.seconds = time.monotonic() - started
    _finish(run, infos, fn, origin)
    return run


def _block_start(block: Any) -> int | None:
    """A block's interval start, from its id ``input-<stream>-<receiver>-<start ms>[suffix]``."""
    digits = block.block_id.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else None


def _wait_for_origin(server: LineServer | None, infos: list, receiver: Any, log: Path) -> float:
    """The run's origin: the socket client connected, or (Kafka) the first batch with records
    started (a consumer group takes seconds to join; until then nothing can happen)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if receiver.poll() is not None:
            raise RuntimeError(
                f"the receiver exited with {receiver.returncode}: {log.read_text(errors='replace')[-2000:]}"
            )
        if server is not None and server.connected.wait(0.05):
            return server.connected_ms
        first = next((info for info in list(infos) if info[1] > 0), None) if server is None else None
        if first is not None:
            return float(first[0] - 1)
        time.sleep(0.05)
    raise RuntimeError(f"the receiver did not start within 60 s: {log.read_text(errors='replace')[-2000:]}")


def run_spark(spark: Any, setup: Setup) -> Run:
    """One run of Spark's own receiver with its PID backpressure on the same socket workload."""
    from pyspark.streaming import StreamingContext
    from pyspark.streaming.listener import StreamingListener

    sc = spark.sparkContext
    run, flag = Run("spark-pid", load=_load()), CapacityFlag(setup.profile)
    fn = BatchFunction(setup.workload, flag)
    infos: list[tuple] = []
    pending = Pending()
    records = RecordCounts()

    class Listener(StreamingListener):
        def onBatchSubmitted(self, event) -> None:
            info = event.batchInfo()
            records.put(info.batchTime().milliseconds(), info.numRecords())
            pending.submitted(info.batchTime().milliseconds(), float(info.submissionTime()))

        def onBatchStarted(self, event) -> None:
            info = event.batchInfo()
            pending.started(info.batchTime().milliseconds(), info.schedulingDelay())

        def onBatchCompleted(self, event) -> None:
            info = event.batchInfo()
            batch_ms = info.batchTime().milliseconds()
            pending.completed(batch_ms)
            infos.append(
                (
                    batch_ms,
                    info.numRecords(),
                    info.processingStartTime(),
                    info.processingDelay(),
                    info.schedulingDelay(),
                )
            )

    def spark_fn(when, rdd) -> None:
        batch_ms = round(when.timestamp() * 1000)
        count = records.get(batch_ms)
        fn(batch_ms, rdd._jrdd.count() if count is None else count)

    conf = sc._jsc.sc().conf()  # the live SparkConf: StreamingContext reads it when it starts
    conf.set("spark.streaming.backpressure.enabled", "true")
    conf.set("spark.streaming.blockInterval", f"{setup.block_ms}ms")
    if setup.initial_rate > 0:
        conf.set("spark.streaming.backpressure.initialRate", str(int(setup.initial_rate)))
    else:
        conf.remove("spark.streaming.backpressure.initialRate")
    server = LineServer(setup.offered)
    # PySpark types the batch duration as int seconds, and takes float ones (Duration(int(seconds * 1000)))
    ssc = StreamingContext(sc, setup.interval_ms / 1000.0)  # type: ignore[arg-type]
    ssc.addStreamingListener(Listener())
    ssc.socketTextStream("127.0.0.1", server.port).foreachRDD(spark_fn)
    started = time.monotonic()
    ssc.start()
    try:
        if not server.connected.wait(60):
            raise RuntimeError("Spark's socket receiver did not connect within 60 s")
        origin = server.connected_ms
        flag.start(origin)
        time.sleep(max(0.0, setup.seconds - (wall_ms() - origin) / 1000.0))
        run.unfinished_delays_ms = pending.delays(wall_ms())
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
        flag.stop()
        server.stop()
    run.seconds = time.monotonic() - started
    _finish(run, infos, fn, origin)
    return run
