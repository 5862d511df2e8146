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

Run: ``.venv/bin/python bench/structured.py [--quick] [--rounds R] [--cap N] [--slow-batches N] [--trigger-ms T]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from harness import fields_figure, options, order, parser, spark_session

from sluice.block_info import ReceivedBlockInfo
from sluice.embedded import start_tracker, stop_process
from sluice.storage.block_store import Block, FileBlockStore
from sluice.tracker.client.sync_client import SyncTrackerClient


def fill(tracker: str, store: FileBlockStore, stream: int, records: int, per_block: int = 100) -> None:
    """Store and report ``records`` records as blocks of ``per_block``, as a receiver does."""
    with SyncTrackerClient(tracker, "receiver") as client:
        client.register_receiver(stream, "bench", "bench")  # the tracker takes blocks of registered streams
        for i in range(records // per_block):
            block_id = f"input-{stream}-bench-{client.incarnation('bench')}-{uuid.uuid4().hex[:12]}"
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

    options = {
        "tracker": tracker,
        "streams": str(stream),
        "records": "value",
        "maxOffsetsPerTrigger": str(args.cap),
        "triggerIntervalMs": str(args.trigger_ms),
        "admission": str(admitted).lower(),
    }
    query = (
        spark.readStream.format("sluice")
        .options(**options)
        .load()
        .writeStream.queryName(name)
        .foreachBatch(process)
        .trigger(processingTime=f"{args.trigger_ms} milliseconds")
        .start()
    )
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
    after = progress[fast + 1 :]
    durations = [p["batchDuration"] for p in after]
    rows = [p["numInputRows"] for p in after]
    return {
        "batch_ms": statistics.median(durations),
        "rows": statistics.median(rows),
        "records_per_s": sum(rows) / (sum(durations) / 1000),
    }


def main() -> None:
    p = parser(__doc__, rounds=3)
    p.add_argument("--cap", type=int, default=1000)
    p.add_argument("--fast", type=int, default=3)
    p.add_argument("--slow-batches", type=int, default=6)
    p.add_argument("--slow-ms-per-record", type=float, default=3.0)
    p.add_argument("--trigger-ms", type=int, default=2000)
    args = options(p)
    from sluice.spark_driver.structured import register

    spark = spark_session("bench-structured")
    register(spark)
    work = Path(tempfile.mkdtemp(prefix="bench-structured-"))
    tracker = start_tracker(work / "wal", args=["--no-fsync"], block_store=(work / "blocks").as_uri())
    store = FileBlockStore(work / "blocks")
    need = args.cap * (args.fast + args.slow_batches + 1)
    sides: dict[str, list[dict[str, float]]] = {"admission": [], "fixed": []}
    try:
        stream = 0
        for r in range(args.rounds):
            for side in order(r, list(sides)):  # alternating rounds, same session, same load
                stream += 1
                fill(tracker.address, store, stream, need)
                sides[side].append(figures(run(spark, tracker.address, stream, side == "admission", args), args.fast))
    finally:
        stop_process(tracker.proc)
        spark.stop()
    fields_figure(
        "structured",
        "after a capacity step: batch duration, rows, records/s",
        sides["admission"],
        ("batch_ms", "rows", "records_per_s"),
        peer_runs=sides["fixed"],
        peer_name=f"fixed maxOffsetsPerTrigger={args.cap}",
        cap=args.cap,
        trigger_ms=args.trigger_ms,
        slow_ms_per_record=args.slow_ms_per_record,
    )


if __name__ == "__main__":
    main()
