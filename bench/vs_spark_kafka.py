"""``format("sluice-kafka")`` against Spark's own ``format("kafka")`` (``spark-sql-kafka-0-10``), the
drop-in it stands for, on one topic of Apache Kafka's broker and the same Spark session.

Both read a backlog of ``--records`` (8 partitions, the JSON values of ``bench/peer_paths/work.py``)
with ``Trigger.AvailableNow`` in micro-batches of ``maxOffsetsPerTrigger`` (``--batch``), each batch
through ``foreachBatch``, in three workloads:

* ``dataframe``: a DataFrame-only query (``count`` and ``sum(length(value))``: no Python per record);
* ``light`` and ``heavy``: a Python function on every record's value, as in ``bench/peers.py``
  (``mapInArrow`` over the value column: parse the JSON, take a field; heavy adds ~100 µs of pure
  Python, calibrated once per run), the partitions' sums collected and checked against what was
  produced.

Records/s: the backlog over the wall time from the query's start to its end (every batch run), so
both pay their planning, their reads and their batch overhead alike.  Each side first reads a small
topic once in the session (its Python workers started, its classes loaded).  Rounds alternate the
sides (order rotating); ``ratio`` is Sluice's median over Spark's, measured in the same rounds.

Spark's connector comes from Maven Central (``sluice.embedded.spark_kafka``, cached outside the
repository) and is added to the session with ``ADD JAR``.

    .venv/bin/python bench/vs_spark_kafka.py [--quick] [--rounds 3] [--records 200000] [--batch 50000]
        [--workloads dataframe,light,heavy] [--spins N] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import functools
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import add_bootstrap, alternate, figure, kafka, options, parser, say
from peer_paths.spark_paths import SUMS_SCHEMA, arrow_sums, session
from peer_paths.work import calibrate, expected_checksum, per_record
from peer_paths.worker import produce_backlog

from sluice.embedded.spark_kafka import add_spark_kafka
from sluice.spark_driver.structured import register

PARTITIONS = 8
WORKLOADS = ("dataframe", "light", "heavy")
SIDES = {"sluice": "sluice-kafka", "spark": "kafka"}
WARM_RECORDS = 2_000


def run_query(
    spark: Any, fmt: str, bootstrap: str, topic: str, batch: int, workload: str, spins: int, tmp: Path
) -> tuple[float, int, int | None]:
    """One AvailableNow run of ``topic``: (seconds, records seen, checksum; None for ``dataframe``)."""
    seen = {"n": 0, "total": 0}
    fn = None if workload == "dataframe" else per_record(workload, spins)

    def process(df: Any, batch_id: int) -> None:
        if fn is None:
            row = df.selectExpr("count(*) AS n", "sum(length(value)) AS total").collect()[0]
            seen["n"] += row.n
            seen["total"] += row.total or 0
            return
        for part in df.select("value").mapInArrow(functools.partial(arrow_sums, fn), SUMS_SCHEMA).collect():
            seen["n"] += part.n
            seen["total"] += part.total

    started = time.monotonic()
    query = (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(batch))
        .load()
        .writeStream.foreachBatch(process)
        .option("checkpointLocation", str(tmp / f"ckpt-{uuid.uuid4().hex[:8]}"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"{fmt}: the query failed: {query.exception()}")
    return time.monotonic() - started, seen["n"], None if fn is None else seen["total"]


def main() -> None:
    p = parser(__doc__, rounds=3)
    p.add_argument("--records", type=int, default=None, help="backlog records (default 200,000; --quick 2,000)")
    p.add_argument("--batch", type=int, default=None, help="maxOffsetsPerTrigger (default 50,000; --quick 1,000)")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    p.add_argument("--spins", type=int, default=None, help="the heavy function's spins (default: ~100 µs here)")
    add_bootstrap(p)
    args = options(p)
    workloads = [w for w in args.workloads.split(",") if w]
    if bad := [w for w in workloads if w not in WORKLOADS]:
        p.error(f"unknown workload {bad[0]!r}: the workloads are {', '.join(WORKLOADS)}")
    records = args.records or (2_000 if args.quick else 200_000)
    batch = args.batch or (1_000 if args.quick else 50_000)  # a smoke run: two micro-batches
    spins = args.spins or calibrate()
    say(f"{records:,} records in batches of {batch:,}; heavy: {spins} spins per record")
    with tempfile.TemporaryDirectory(prefix="sluice-bench-vs-spark-kafka-") as tmp, kafka(args.bootstrap) as bootstrap:
        with session("local[2]") as spark:  # its Python workers import peer_paths
            register(spark)
            add_spark_kafka(spark)
            measure(spark, bootstrap, args, workloads, records, batch, spins, Path(tmp))


def measure(
    spark: Any, bootstrap: str, args: Any, workloads: list[str], records: int, batch: int, spins: int, tmp: Path
) -> None:
    """Every workload's alternating rounds on one backlog, a figure line each."""
    topic, warm = f"vsk-{uuid.uuid4().hex[:8]}", f"vsk-warm-{uuid.uuid4().hex[:8]}"
    produce_backlog(bootstrap, topic, PARTITIONS, records)
    produce_backlog(bootstrap, warm, PARTITIONS, WARM_RECORDS)
    for fmt in SIDES.values():  # each side's first read pays its start-up, not a measured run
        run_query(spark, fmt, bootstrap, warm, WARM_RECORDS, "light", spins, tmp)
    for workload in workloads:
        expected = None if workload == "dataframe" else expected_checksum(workload, spins, records)

        def side(name: str, workload: str = workload, expected: int | None = expected) -> Callable[[int], float]:
            def run(r: int) -> float:
                seconds, n, total = run_query(spark, SIDES[name], bootstrap, topic, batch, workload, spins, tmp)
                if n != records or (expected is not None and total != expected):
                    raise RuntimeError(f"{name} {workload}: {n} records, checksum {total} (want {records}, {expected})")
                say(f"  round {r + 1}: {workload} {name} {records / seconds:,.0f} records/s ({seconds:.1f} s)")
                return records / seconds

            return run

        values = alternate(args.rounds, {name: side(name) for name in SIDES})
        figure(
            "vs_spark_kafka",
            f"records/s, Trigger.AvailableNow micro-batches, {workload}",
            "records/s",
            values["sluice"],
            peer=values["spark"],
            peer_name='Spark\'s format("kafka") (spark-sql-kafka-0-10)',
            digits=0,
            workload=workload,
            records=records,
            max_offsets_per_trigger=batch,
            partitions=PARTITIONS,
            spins=spins if workload == "heavy" else None,
        )


if __name__ == "__main__":
    main()
