"""Structured Streaming admission against a fixed ``maxOffsetsPerTrigger`` on a capacity step.

One real tracker; each run fills a fresh stream with blocks and runs one ``format("sluice")`` query
over it, the two sides in alternating rounds in one local SparkSession, both capped at ``--cap``
records per trigger (``--trigger-ms``, 2,000).  The batch function costs nothing per record for
``--fast`` batches, then ``--slow-ms-per-record`` (the capacity step).  **admission** has the PID listener
(``sluice.spark_driver.structured.admission``) feeding its progress back; **fixed** (the peer) has
only the cap, as Structured Streaming offers.

Figures per side, over the batches after the step's first one (which neither side could foresee):
``batch_ms`` (median batch duration: what the trigger interval should bound),
``rows`` (median batch size) and ``records_per_s`` (throughput).  ``ratio`` is admission's median
batch duration over fixed's: below 1 means admission keeps batches near the trigger interval.

Run: ``.venv/bin/python bench/structured.py [--repeat R] [--cap N] [--slow-batches N] [--trigger-ms T]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from harness import ratio_of_medians, report

from sluice.block_info import ReceivedBlockInfo
from sluice.processes import start_tracker, stop_process
from sluice.storage.block_store import Block, FileBlockStore
from sluice.tracker.sync_client import SyncTrackerClient


def fill(tracker: str, store: FileBlockStore, stream: int, records: int, per_block: int = 100) -> None:
    """Store and report ``records`` records as blocks of ``per_block``, as a receiver does."""
    with SyncTrackerClient(tracker, "receiver") as client:
        for i in range(records // per_block):
            block_id = f"b-{uuid.uuid4().hex[:12]}"
            location = store.write(Block(stream, block_id, [f"{stream}-{i}-{j}" for j in range(per_block)]))
            client.add_block(ReceivedBlockInfo(stream, block_id, "bench", per_block, location))


def run(spark, tracker: str, stream: int, admitted: bool, args: argparse.Namespace) -> list[dict]:
    """One query to ``--fast`` + ``--slow-batches`` batches; the progress of each batch."""
    from sluice.spark_driver.structured import admit

    name, done, seen = f"bench{uuid.uuid4().hex[:8]}", threading.Event(), []

    def process(df, batch_id: int) -> None:
        rows = df.count()
        seen.append(rows)
        if len(seen) > args.fast:
            time.sleep(rows * args.slow_ms_per_record / 1000)
        if len(seen) >= args.fast + args.slow_batches:
            done.set()

    options = {"tracker": tracker, "streams": str(stream), "records": "value", "maxOffsetsPerTrigger": str(args.cap),
               "triggerIntervalMs": str(args.trigger_ms), "admission": str(admitted).lower()}
    query = (spark.readStream.format("sluice").options(**options).load().writeStream.queryName(name)
             .foreachBatch(process).trigger(processingTime=f"{args.trigger_ms} milliseconds").start())
    listener = admit(spark, query_name=name, options=options, estimator="pid") if admitted else None
    try:
        if not done.wait(600):
            raise RuntimeError(f"query {name} did not run {args.fast + args.slow_batches} batches in 600 s")
    finally:
        query.stop()
        if listener is not None:
            listener.stop()
    return [p for p in query.recentProgress if p["numInputRows"]]


def figures(progress: list[dict], fast: int) -> dict[str, float]:
    after = progress[fast + 1:]
    durations = [p["batchDuration"] for p in after]
    rows = [p["numInputRows"] for p in after]
    return {"batch_ms": statistics.median(durations), "rows": statistics.median(rows),
            "records_per_s": sum(rows) / (sum(durations) / 1000)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--cap", type=int, default=1000)
    parser.add_argument("--fast", type=int, default=3)
    parser.add_argument("--slow-batches", type=int, default=6)
    parser.add_argument("--slow-ms-per-record", type=float, default=3.0)
    parser.add_argument("--trigger-ms", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from sluice.spark_driver.structured import register

    spark = (SparkSession.builder.master("local[2]").appName("bench-structured").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    work = Path(tempfile.mkdtemp(prefix="bench-structured-"))
    tracker = start_tracker(work / "wal", args=["--no-fsync"])
    store = FileBlockStore(work / "blocks")
    need = args.cap * (args.fast + args.slow_batches + 1)
    sides: dict[str, list[dict[str, float]]] = {"admission": [], "fixed": []}
    try:
        stream = 0
        for _ in range(args.repeat):
            for side in ("admission", "fixed"):  # alternating rounds, same session, same load
                stream += 1
                fill(tracker.address, store, stream, need)
                sides[side].append(figures(run(spark, tracker.address, stream, side == "admission", args), args.fast))
    finally:
        stop_process(tracker.proc)
        spark.stop()

    def summary(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
        return {k: {"median": statistics.median(r[k] for r in runs), "min": min(r[k] for r in runs),
                    "max": max(r[k] for r in runs)} for k in runs[0]}

    report("structured", runs=args.repeat, cap=args.cap, slow_ms_per_record=args.slow_ms_per_record,
           trigger_ms=args.trigger_ms,
           load=os.getloadavg()[0], admission=summary(sides["admission"]), peer=summary(sides["fixed"]),
           ratio=ratio_of_medians([r["batch_ms"] for r in sides["admission"]],
                                  [r["batch_ms"] for r in sides["fixed"]]))


if __name__ == "__main__":
    main()
