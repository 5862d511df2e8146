"""Writing to Kafka from Spark: Sluice's transactional sink against its at-least-once mode and Spark's
own ``format("kafka")`` sink, on one DataFrame, one session and one broker.

* **exactly_once**: ``Batch.write_kafka``'s tasks (:mod:`sluice.spark_driver.kafka_sink`): per
  task a transactional producer, a marker lookup, one transaction carrying the records and the
  marker offset, a commit;
* **at_least_once**: the same tasks with a plain idempotent producer (``acks=all``), no transaction;
* **spark**: ``df.write.format("kafka")`` (``spark-sql-kafka-0-10`` from Maven Central), Spark's
  Kafka sink, which has no transactions: a re-run writes its records again.

The DataFrame (``--records`` rows of ``--value-bytes`` in ``--partitions`` partitions, so as many
tasks) is cached and counted once; every round writes it with each side, in rotating order, to a
fresh topic of ``--partitions`` partitions.  JSON lines: records/s of each Sluice mode against
Spark's sink (the ratio: what Sluice's producer costs over Spark's Java one), exactly once against
at least once (what a transaction per task costs), and the seconds of one task's transaction, begin
to commit, over every task of every round (what a batch waits for its output to become visible).

Run: ``.venv/bin/python bench/kafka_sink.py [--quick] [--rounds R] [--records N] [--partitions P]
[--value-bytes B] [--bootstrap HOST:PORT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
import uuid
from typing import Any

from harness import add_bootstrap, alternate, figure, fresh_topic, kafka, options, parser, say, spark_session

from sluice.embedded import create_topic


def sluice_write(df: Any, bootstrap: str, topic: str, mode: str, batch: int) -> list[float]:
    """Write ``df`` through Sluice's sink in ``mode``; the seconds of each task's write."""
    from sluice.spark_driver.kafka_sink import SinkSettings, write_rdd

    settings = SinkSettings(topic, bootstrap, f"bench-{uuid.uuid4().hex[:8]}", batch, mode)
    outcomes = write_rdd(df.rdd, settings, from_df=True)
    written = {"exactly_once": "committed", "at_least_once": "written"}[mode]
    if any(o.status != written for o in outcomes):
        raise RuntimeError(f"{mode}: tasks ended {sorted({o.status for o in outcomes})}, not all {written}")
    return [o.seconds for o in outcomes]


def spark_write(df: Any, bootstrap: str, topic: str) -> None:
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--records", type=int, default=None, help="rows written per side and round (default 200,000)")
    p.add_argument("--partitions", type=int, default=4, help="DataFrame partitions (tasks) and topic partitions")
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--master", default="local[2]")
    add_bootstrap(p)
    args = options(p, argv)
    records = args.records or (2_000 if args.quick else 200_000)
    if records < 1 or args.partitions < 1 or args.value_bytes < 1:
        p.error("--records, --partitions and --value-bytes must be at least 1")

    from sluice.embedded.spark_kafka import add_spark_kafka

    with kafka(args.bootstrap) as bootstrap:
        spark = spark_session("sluice-bench-kafka-sink", args.master)
        try:
            add_spark_kafka(spark)
            measure(spark, bootstrap, records, args)
        finally:
            spark.stop()


def measure(spark: Any, bootstrap: str, records: int, args: argparse.Namespace) -> None:
    df = spark.range(records, numPartitions=args.partitions).selectExpr(
        "CAST(id % 1000 AS STRING) AS key",
        f"concat(lpad(CAST(id AS STRING), 9, '0'), repeat('x', {args.value_bytes - 9})) AS value",
    )
    df = df.cache()
    assert df.count() == records
    task_seconds: dict[str, list[float]] = {"exactly_once": [], "at_least_once": []}

    def topic(side: str) -> str:
        name = fresh_topic(f"bench-sink-{side}")
        asyncio.run(create_topic(bootstrap, args.partitions, name))
        return name

    def timed(side: str, r: int) -> float:
        out = topic(side)
        started = time.perf_counter()
        if side == "spark":
            spark_write(df, bootstrap, out)
        else:
            task_seconds[side].extend(sluice_write(df, bootstrap, out, side, 1000 * (r + 1)))
        return records / (time.perf_counter() - started)

    sides = ("exactly_once", "at_least_once", "spark")
    values = alternate(args.rounds, {side: functools.partial(timed, side) for side in sides})
    common = {"records": records, "partitions": args.partitions, "value_bytes": args.value_bytes, "master": args.master}
    spark_name = 'Spark\'s format("kafka") sink (spark-sql-kafka-0-10), same DataFrame and broker'
    rates = {  # figure name: (ours, the peer, the peer's name)
        "records/s written exactly once (a transaction per task)": ("exactly_once", "spark", spark_name),
        "records/s written at least once (idempotent producer, acks=all)": ("at_least_once", "spark", spark_name),
        "records/s exactly once against at least once, Sluice's two modes": (
            "exactly_once",
            "at_least_once",
            "Sluice's at_least_once mode, same tasks",
        ),
    }
    eo, alo, cost = (
        figure("kafka_sink", name, "records/s", values[ours], peer=values[peer], peer_name=who, digits=0, **common)
        for name, (ours, peer, who) in rates.items()
    )
    commit = figure(
        "kafka_sink",
        "seconds of one task's transaction, begin to commit, every task of every round",
        "s",
        task_seconds["exactly_once"],
        peer=task_seconds["at_least_once"],
        peer_name="one task's sends, at_least_once",
        **common,
    )
    say(
        f"{records:,} records in {args.partitions} tasks: exactly once {eo['median']:,.0f} records/s, "
        f"at least once {alo['median']:,.0f}, Spark's sink {eo['peer']['median']:,.0f} "
        f"(ratios {eo['ratio']:.2f} and {alo['ratio']:.2f}; a transaction costs {1 - cost['ratio']:.0%}); "
        f"a task's transaction {commit['median']:.3f} s median"
    )


if __name__ == "__main__":
    main()
