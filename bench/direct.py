"""Direct Kafka mode throughput: records/s read by Spark tasks against a plain aiokafka loop.

The same offset ranges are read twice in the same run, from the same broker:

* **direct**: ``DirectKafkaSource`` batches (driver: latest offsets, limits, checkpoint; Spark:
  one task per partition reading its range with aiokafka and ``count()``-ing the records);
* **peer**: one process, one aiokafka consumer assigned to every partition, ``getmany`` until each
  partition reached the end offset; what a hand-written reader would do.

Why a ratio: absolute records/s depend on the machine and its load (the box is shared); the ratio
says what Spark's scheduling, the Python worker and per-task consumers cost over reading the same
data in one loop.  Direct mode is there to scale out over executors, which one local[N] box
cannot show; on one box we want the overhead to stay a small factor.

Each topic size (``--records``, one topic each) is its own series.  Rounds alternate the two; per
size, one JSON line: direct mode's records/s (median, min, max, runs), the peer's, ``ratio`` of the
medians (target >= 0.7), the records per batch, the load.  A second line, from the same rounds, is
Spark's own floor: a job of as many tasks doing nothing (``parallelize(ranges, n).count()``), times
the batches, against the peer's whole read: what no reader inside Spark tasks can go under.  Two
sizes by default, because the ratio depends on it: with 50,000 records per batch that fixed floor
is larger than the peer's whole read; with 250,000 the batches are bound by reading.

Run: ``.venv/bin/python bench/direct.py [--quick] [--rounds R] [--records N [N ...]] [--partitions P]
[--batches B] [--bootstrap HOST:PORT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from typing import Any

from harness import add_bootstrap, alternate, figure, fresh_topic, kafka, options, parser, produce, say, spark_session


def peer_read(bootstrap: str, ends: dict[tuple[str, int], int]) -> int:
    """Read ``[0, end)`` of every partition with one consumer in this process; records read."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> int:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            tps = {TopicPartition(t, p): end for (t, p), end in ends.items() if end > 0}
            consumer.assign(list(tps))
            for tp in tps:
                consumer.seek(tp, 0)
            count, remaining = 0, dict(tps)
            while remaining:
                fetched = await consumer.getmany(*remaining, timeout_ms=500, max_records=2000)
                for tp, records in fetched.items():
                    for r in records:
                        if r.offset < remaining.get(tp, 0):
                            count += 1
                    if records and records[-1].offset + 1 >= remaining.get(tp, 0):
                        remaining.pop(tp, None)
            return count
        finally:
            await consumer.stop()

    return asyncio.run(run())


def direct_read(
    spark, bootstrap: str, topic: str, ends: dict[tuple[str, int], int], batches: int, checkpoint_dir: str
) -> tuple[int, int]:
    """Drain the topic through DirectKafkaSource in ``batches`` batches; (records, batches run)."""
    from sluice.spark_driver.batch import BatchInfo
    from sluice.spark_driver.direct.source import DirectKafkaSource
    from sluice.spark_driver.source import SourceContext

    total = sum(ends.values())
    per_partition_rate = max(total // len(ends) // batches + 1, 1)  # per 1 s batch
    source = DirectKafkaSource(
        bootstrap,
        topic,
        f"bench-{topic}-{time.time_ns()}",
        checkpoint_dir=checkpoint_dir,
        max_rate_per_partition=per_partition_rate,
    )
    source.start(SourceContext(spark, 1000))
    try:
        count, runs, t = 0, 0, 1000
        while count < total:
            batch = source.create_batch(t, None)
            assert batch is not None, "a later batch time always makes a batch"
            n = batch.rdd.count()
            source.on_batch_completed(batch, BatchInfo(t, n, submission_time_ms=0, status="succeeded"))
            count, runs, t = count + n, runs + 1, t + 1000
            if n == 0:
                raise RuntimeError(f"direct mode stalled at {count} of {total} records")
        return count, runs
    finally:
        source.stop()


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument(
        "--records",
        type=int,
        nargs="+",
        default=None,
        help="topic sizes, one series each (default 200,000 and 1,000,000; --quick 4,000)",
    )
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--batches", type=int, default=4, help="batches the direct run drains the topic in")
    p.add_argument("--master", default="local[2]")
    add_bootstrap(p)
    args = options(p, argv)
    sizes = args.records or ([4_000] if args.quick else [200_000, 1_000_000])
    if min(sizes) < 1:
        p.error(f"--records must be at least 1, got {min(sizes)}")

    with kafka(args.bootstrap) as bootstrap:
        spark = spark_session("sluice-bench-direct", args.master)
        try:
            spark.sparkContext.parallelize(range(4), 2).count()  # start the Python workers once
            for records in sizes:
                measure(spark, bootstrap, fresh_topic(f"bench-direct-{records}"), records, args)
        finally:
            spark.stop()


def measure(spark: Any, bootstrap: str, topic: str, records: int, args: argparse.Namespace) -> None:
    """Produce ``records`` to ``topic``, then the alternating rounds and the two JSON lines of that size."""
    from sluice.kafka.offsets_client import KafkaOffsets

    t0 = time.perf_counter()
    asyncio.run(produce(bootstrap, topic, args.partitions, records, args.value_bytes))
    say(
        f"produced {records} records of {args.value_bytes} B to {args.partitions} partitions "
        f"in {time.perf_counter() - t0:.1f}s"
    )
    kafka = KafkaOffsets(bootstrap, [topic], "bench-ends")
    kafka.start()
    ends = kafka.latest_offsets()
    kafka.close()
    assert sum(ends.values()) == records, ends

    batches_run: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:

        def peer(r: int) -> float:
            t0 = time.perf_counter()
            n = peer_read(bootstrap, ends)
            assert n == records, n
            return records / (time.perf_counter() - t0)

        def direct(r: int) -> float:
            t0 = time.perf_counter()
            n, runs = direct_read(spark, bootstrap, topic, ends, args.batches, f"{tmp}/ckpt{r}")
            assert n == records, n
            batches_run.append(runs)
            return records / (time.perf_counter() - t0)

        def floor(r: int) -> float:
            """Seconds of ``batches`` empty jobs of one task per range, as the direct run submits."""
            empty = [0] * len(ends)
            t0 = time.perf_counter()
            for _ in range(args.batches):
                spark.sparkContext.parallelize(empty, len(empty)).count()
            return time.perf_counter() - t0

        values = alternate(args.rounds, {"direct": direct, "peer": peer, "floor": floor})
    per_batch = records // max(batches_run)
    line = figure(
        "direct",
        "records/s through direct mode",
        "records/s",
        values["direct"],
        peer=values["peer"],
        peer_name="one aiokafka getmany loop, one process, same ranges",
        target=">= 0.7",
        digits=0,
        records=records,
        records_per_batch=per_batch,
        partitions=args.partitions,
        batches=max(batches_run),
        master=args.master,
    )
    peer_seconds = [records / v for v in values["peer"]]
    floor_line = figure(
        "direct",
        "Spark's own floor: empty jobs of one task per range, one per batch",
        "s",
        values["floor"],
        peer=peer_seconds,
        peer_name="the peer's whole read, seconds",
        records=records,
        jobs=args.batches,
        tasks_per_job=len(ends),
        master=args.master,
    )
    say(
        f"{records:,} records: Spark's floor ({args.batches} empty jobs of {len(ends)} tasks) "
        f"{floor_line['median']:.3f} s against the peer's whole read {floor_line['peer']['median']:.3f} s"
    )
    say(
        f"{records:,} records ({per_batch:,} per batch): direct (Spark tasks, {args.master}, {max(batches_run)} "
        f"batches, {args.partitions} ranges each) median {line['median']:,.0f} records/s; peer (one aiokafka loop) "
        f"{line['peer']['median']:,.0f}; ratio {line['ratio']:.2f} "
        f"(target >= 0.7: {'met' if line['met'] else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
