"""Sluice's three paths, each in a worker process of its own with a Spark session (``local[2]``, or
the ``--master`` given): the receiver path (a ``sluice-tracker``, a ``sluice-receiver`` with the
Kafka source, the ``StreamingDriver``), direct mode (``DirectKafkaSource``) and Structured
Streaming's ``readStream.format("sluice-kafka")``.

Every batch runs the per-record function in Spark tasks, one partition's sums per task
(:func:`~peer_paths.work.partition_sums`), and hands them to the sink on the driver: a record's
output is its batch's end.  Backpressure is off (the rate a run gets is the producer's, or the
whole backlog), so what is measured is the path, not the rate controller.
"""

from __future__ import annotations

import functools
import operator
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from peer_paths.work import Sink, partition_sums

BENCH = Path(__file__).resolve().parents[1]


def record_value(record: Any) -> Any:
    return record.value


def sums(rdd: Any, fn: Callable, get: Callable[[Any], Any]) -> list[tuple]:
    return rdd.mapPartitions(lambda records: [partition_sums(fn, map(get, records))]).collect()


def to_sink(sink: Sink, parts: list[tuple], read: float | None = None) -> None:
    """A batch's partition sums into the sink; ``read``: when its first record was read, if earlier
    than the first task's first record (a receiver reads before the batch)."""
    count = sum(p[0] for p in parts)
    firsts = [p[2] for p in parts if p[2] is not None] + ([read] if read is not None else [])
    sink.add_batch(count, sum(p[1] for p in parts), min(firsts) if firsts else None, [t for p in parts for t in p[3]])


def block_start(block_id: str) -> float | None:
    """A block's interval start (s), from its id ``input-<stream>-<receiver>-<start ms>[suffix]``: its
    records were read after it, so it starts the receiver path's window no later than its first read."""
    found = re.search(r"-(\d{12,})", block_id)  # milliseconds since the epoch
    return int(found.group(1)) / 1000 if found else None


def on_receiver_batch(ctx: Any, batch: Any) -> None:
    """A receiver-mode batch into the sink, its first record read at its earliest block's start."""
    if not batch.is_empty:
        starts = [s for s in (block_start(b.block_id) for b in batch.blocks) if s is not None]
        to_sink(ctx.sink, sums(batch.rdd, ctx.fn, record_value), min(starts) if starts else None)


def on_batch(ctx: Any, batch: Any) -> None:
    """A ``StreamingDriver`` batch (receiver or direct mode) into the sink."""
    if not batch.is_empty:
        to_sink(ctx.sink, sums(batch.rdd, ctx.fn, record_value))


@contextmanager
def session(master: str, conf: dict[str, str] | None = None) -> Iterator[Any]:
    """A Spark session whose Python workers import ``peer_paths`` (``bench/`` on their path), with
    ``conf`` over the bench's settings (on a standalone cluster: its cores and executor memory)."""
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(BENCH), os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("sluice-bench-peers")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    )
    for key, val in (conf or {}).items():
        builder = builder.config(key, val)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.parallelize(range(4), 2).map(functools.partial(operator.add, 1)).count()  # workers up
    try:
        yield spark
    finally:
        spark.stop()


def receiver_path(spark: Any, ctx: Any, ready: Callable[[], None]) -> None:
    from sluice.embedded import receiver_argv, start_service, start_tracker, stop_process
    from sluice.spark_driver import StreamingDriver

    tmp = ctx.tmp
    tracker = start_tracker(tmp / "wal", args=["--log-level", "WARNING"], block_store=(tmp / "blocks").as_uri())
    driver = StreamingDriver(
        spark,
        tracker=tracker.address,
        batch_interval_ms=ctx.interval_ms,
        backpressure=False,
        max_batch_partitions=ctx.max_batch_partitions,
    )
    driver.foreach_batch(functools.partial(on_receiver_batch, ctx))
    driver.start()
    receiver = start_service(
        receiver_argv(
            tracker.address,
            bootstrap=ctx.bootstrap,
            topic=ctx.topic,
            group=ctx.group,
            block_store=(tmp / "blocks").as_uri(),
            receiver_id="peers",
            extra=["--log-level", "WARNING"],
        ),
        log=tmp / "receiver.log",
    )
    try:
        ready()
        ctx.wait(lambda: (tmp / "receiver.log").read_text(errors="replace")[-2000:])
    finally:
        driver.stop(graceful=False)
        stop_process(receiver)
        tracker.stop()


def direct_path(spark: Any, ctx: Any, ready: Callable[[], None]) -> None:
    from sluice.spark_driver import StreamingDriver
    from sluice.spark_driver.direct import DirectKafkaSource

    source = DirectKafkaSource(ctx.bootstrap, ctx.topic, ctx.group, "earliest", checkpoint_dir=str(ctx.tmp / "ckpt"))
    driver = StreamingDriver(spark, source=source, batch_interval_ms=ctx.interval_ms, backpressure=False)
    driver.foreach_batch(functools.partial(on_batch, ctx))
    driver.start()
    try:
        ready()
        ctx.wait(lambda: "")
    finally:
        driver.stop(graceful=False)


#: What :func:`arrow_sums` gives per partition: :func:`~peer_paths.work.partition_sums`'s tuple.
SUMS_SCHEMA = "n long, total long, first double, sampled array<double>"


def arrow_sums(fn: Callable, batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow``'s function: one partition's sums, its values read a column at a time from the
    Arrow batches Spark hands over (no row is built in the JVM or pickled to Python)."""
    import pyarrow as pa

    n, total, first, sampled = partition_sums(fn, (v for b in batches for v in b.column(0).to_pylist()))
    yield pa.RecordBatch.from_pylist([{"n": n, "total": total, "first": first, "sampled": sampled}])


def structured_path(spark: Any, ctx: Any, ready: Callable[[], None]) -> None:
    from sluice.spark_driver.structured import register

    register(spark)

    def process(df: Any, batch_id: int) -> None:
        parts = df.select("value").mapInArrow(functools.partial(arrow_sums, ctx.fn), SUMS_SCHEMA).collect()
        to_sink(ctx.sink, [tuple(row) for row in parts])

    query = (
        spark.readStream.format("sluice-kafka")
        .option("kafka.bootstrap.servers", ctx.bootstrap)
        .option("subscribe", ctx.topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.foreachBatch(process)
        .option("checkpointLocation", str(ctx.tmp / "ckpt"))
        .trigger(processingTime=f"{ctx.interval_ms} milliseconds")
        .start()
    )
    try:
        ready()
        ctx.wait(lambda: str(query.exception() or ""))
    finally:
        query.stop()


PATHS: dict[str, Callable[[Any, Any, Callable[[], None]], None]] = {
    "sluice-receiver": receiver_path,
    "sluice-direct": direct_path,
    "sluice-kafka-structured": structured_path,
}
