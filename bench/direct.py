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

Rounds alternate the two; one JSON line: direct mode's records/s (median, min, max, runs), the peer's,
``ratio`` of the medians (target >= 0.7), the load.  A second line, from the same rounds, is Spark's
own floor: a job of as many tasks doing nothing (``parallelize(ranges, n).count()``), times the
batches, against the peer's whole read: what no reader inside Spark tasks can go under.

Run: ``.venv/bin/python bench/direct.py [--quick] [--rounds R] [--records N] [--partitions P] [--batches B]``.
"""

from __future__ import annotations

import asyncio
import tempfile
import time

from harness import alternate, figure, options, parser, produce, say, spark_session

from sluice.processes import start_broker


def peer_read(bootstrap: str, ends: dict[tuple[str, int], int]) -> int:
    """Read ``[0, end)`` of every partition with one consumer in this process; records read."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
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


def direct_read(spark, bootstrap: str, topic: str, ends: dict[tuple[str, int], int], batches: int,
                checkpoint_dir: str) -> tuple[int, int]:
    """Drain the topic through DirectKafkaSource in ``batches`` batches; (records, batches run)."""
    from sluice.spark_driver.batch import BatchInfo
    from sluice.spark_driver.direct.source import DirectKafkaSource
    from sluice.spark_driver.source import SourceContext

    total = sum(ends.values())
    per_partition_rate = max(total // len(ends) // batches + 1, 1)  # per 1 s batch
    source = DirectKafkaSource(bootstrap, topic, f"bench-{topic}-{time.time_ns()}", checkpoint_dir=checkpoint_dir,
                               max_rate_per_partition=per_partition_rate)
    source.start(SourceContext(spark, 1000))
    try:
        count, runs, t = 0, 0, 1000
        while count < total:
            batch = source.create_batch(t, None)
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
    p.add_argument("--records", type=int, default=None, help="default 200,000; --quick 4,000")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--batches", type=int, default=4, help="batches the direct run drains the topic in")
    p.add_argument("--master", default="local[2]")
    args = options(p, argv)
    records = args.records or (4_000 if args.quick else 200_000)

    from sluice.spark_driver.direct.kafka import KafkaOffsets

    broker = start_broker()
    spark = None
    try:
        topic = "bench-direct"
        t0 = time.perf_counter()
        asyncio.run(produce(broker.bootstrap, topic, args.partitions, records, args.value_bytes))
        say(f"produced {records} records of {args.value_bytes} B to {args.partitions} partitions "
            f"in {time.perf_counter() - t0:.1f}s")
        kafka = KafkaOffsets(broker.bootstrap, [topic], "bench-ends")
        kafka.start()
        ends = kafka.latest_offsets()
        kafka.close()
        assert sum(ends.values()) == records, ends

        spark = spark_session("sluice-bench-direct", args.master)
        spark.sparkContext.parallelize(range(4), 2).count()  # start the Python workers once

        batches_run: list[int] = []
        with tempfile.TemporaryDirectory() as tmp:
            def peer(r: int) -> float:
                t0 = time.perf_counter()
                n = peer_read(broker.bootstrap, ends)
                assert n == records, n
                return records / (time.perf_counter() - t0)

            def direct(r: int) -> float:
                t0 = time.perf_counter()
                n, runs = direct_read(spark, broker.bootstrap, topic, ends, args.batches, f"{tmp}/ckpt{r}")
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
        line = figure("direct", "records/s through direct mode", "records/s", values["direct"], peer=values["peer"],
                      peer_name="one aiokafka getmany loop, one process, same ranges", target=">= 0.7", digits=0,
                      records=records, partitions=args.partitions, batches=max(batches_run), master=args.master)
        peer_seconds = [records / v for v in values["peer"]]
        floor_line = figure("direct", "Spark's own floor: empty jobs of one task per range, one per batch", "s",
                            values["floor"], peer=peer_seconds, peer_name="the peer's whole read, seconds",
                            jobs=args.batches, tasks_per_job=len(ends), master=args.master)
        say(f"Spark's floor ({args.batches} empty jobs of {len(ends)} tasks): {floor_line['median']:.3f} s against "
            f"the peer's whole read {floor_line['peer']['median']:.3f} s")
        say(f"direct (Spark tasks, {args.master}, {max(batches_run)} batches, {args.partitions} ranges each): "
            f"median {line['median']:,.0f} records/s; peer (one aiokafka loop) {line['peer']['median']:,.0f}; "
            f"ratio {line['ratio']:.2f} (target >= 0.7: {'met' if line['met'] else 'MISSED'})")
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()


if __name__ == "__main__":
    main()
