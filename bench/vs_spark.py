"""Sluice's receiver pipeline against Spark's own, on the same socket source and the same function.

Spark: ``StreamingContext.socketTextStream`` (its receiver in the JVM, blocks in its block
manager) with ``spark.streaming.backpressure.enabled`` off, each batch ``rdd.map(per_record).sum()``
in PySpark.  Sluice: a ``sluice-receiver`` process (socket source, blocks in a ``file://`` store,
fsynced), a ``sluice-tracker`` (fsync off, as Spark's WAL is off) and the ``StreamingDriver`` with
backpressure off on the same Spark session, each batch the same ``map(per_record).sum()``.  Both
read newline-terminated lines from a local server that writes as fast as its client reads, in
1 s batches, 200 ms blocks.

Sustained records/s: a batch of ``n`` records that took ``p`` ms to process sustained
``n / max(p, interval)`` (a batch that finished early waited for the next tick; one that overran
delayed the next), summed over the batches after the first with records (start-up), as
``sum(n) / sum(max(p, interval))``; each line also gives the median processing time in intervals.
Rounds alternate the two.

With backpressure off and an unbounded source, the slower system queues batches until its memory
runs out (Spark's receiver did, in 12 s).  So each system's receiver is capped
(``spark.streaming.receiver.maxRate``, ``receiver.max_rate``) at a rate found first by short probes
(``--probes``, 5 s each): the first unbounded, each next one at the rate the last one's batches
could have been processed in one interval (records / processing time); the measured rounds run at
the last probe's answer (``--quick``: no probes, both capped at ``QUICK_CAP``).  A median
processing time well under one interval in the measured rounds
means the input, not the batch function, was the limit (the receiver could not take more).
Target: Sluice >= 2x Spark.

    .venv/bin/python bench/vs_spark.py [--quick] [--rounds 5] [--seconds 12]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from control_workload import LineServer
from harness import alternate, figure, options, parser, say, spark_session

from sluice.embedded import receiver_argv, start_service, start_tracker, stop_process

INTERVAL_MS = 1000
BLOCK_MS = 200
WARM_UP_BATCHES = 1
UNBOUNDED = 1e9  # lines/s: the server writes as fast as the client reads
# A smoke run has no probes: both receivers take this cap, as an uncapped Spark receiver can queue
# more than its JVM holds (a smoke run in the suite hung past 180 s once that way).
QUICK_CAP = 20_000.0


def per_record(line: str) -> int:
    """The function both pipelines run on every record: split the line, count its words."""
    return len(line.split())


def sustained(batches: list[tuple[int, int, float]], interval_ms: float, warm_up: int) -> tuple[float, float]:
    """(records/s sustained, median processing in intervals) of (batch ms, records, processing ms),
    from the ``warm_up``-th batch with records on (the first carry start-up costs)."""
    ordered = sorted(batches)
    first = next((i for i, (_, n, _) in enumerate(ordered) if n > 0), len(ordered))
    steady = ordered[first + warm_up :]
    if not steady:
        raise RuntimeError(f"no batch completed after {warm_up} warm-up batches: {ordered}")
    busy_ms = sum(max(p, interval_ms) for _, _, p in steady)
    return (sum(n for _, n, _ in steady) / busy_ms * 1000, statistics.median(p for _, _, p in steady) / interval_ms)


def until_records(batches: list[tuple[int, int, float]], seconds: float, timeout: float = 60.0) -> None:
    """Wait for the first completed batch with records (start-up is not measured), then ``seconds``."""
    deadline = time.monotonic() + timeout
    while not any(n for _, n, _ in list(batches)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no batch with records completed within {timeout:.0f} s")
        time.sleep(0.05)
    time.sleep(seconds)


def run_spark(spark: Any, seconds: float, warm_up: int, max_rate: float | None) -> tuple[float, float]:
    from pyspark.streaming import StreamingContext
    from pyspark.streaming.listener import StreamingListener

    batches: list[tuple[int, int, float]] = []

    class Listener(StreamingListener):
        def onBatchCompleted(self, event) -> None:
            info = event.batchInfo()
            if info.processingDelay() is not None and info.processingDelay() >= 0:
                batches.append((info.batchTime().milliseconds(), info.numRecords(), float(info.processingDelay())))

    conf = spark.sparkContext._jsc.sc().conf()
    conf.set("spark.streaming.backpressure.enabled", "false")
    conf.set("spark.streaming.blockInterval", f"{BLOCK_MS}ms")
    if max_rate:
        conf.set("spark.streaming.receiver.maxRate", str(int(max_rate)))
    else:
        conf.remove("spark.streaming.receiver.maxRate")

    def process(rdd: Any) -> None:
        rdd.map(per_record).sum()  # the action that runs the batch

    server = LineServer(UNBOUNDED)
    # PySpark types the batch duration as int seconds, and takes float ones (Duration(int(seconds * 1000)))
    ssc = StreamingContext(spark.sparkContext, INTERVAL_MS / 1000)  # type: ignore[arg-type]
    ssc.addStreamingListener(Listener())
    ssc.socketTextStream("127.0.0.1", server.port).foreachRDD(process)
    ssc.start()
    try:
        if not server.connected.wait(60):
            raise RuntimeError("Spark's socket receiver did not connect within 60 s")
        until_records(batches, seconds)
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
        server.stop()
    return sustained(batches, INTERVAL_MS, warm_up)


def run_sluice(spark: Any, seconds: float, warm_up: int, max_rate: float | None, tmp: Path) -> tuple[float, float]:
    from sluice.spark_driver import StreamingDriver

    tmp.mkdir(parents=True)
    batches: list[tuple[int, int, float]] = []

    class Listener:
        def on_batch_completed(self, info) -> None:
            if info.processing_delay_ms is not None:
                batches.append((info.batch_time_ms, info.num_records, float(info.processing_delay_ms)))

    tracker = start_tracker(
        tmp / "wal", args=["--no-fsync", "--log-level", "WARNING"], block_store=(tmp / "blocks").as_uri()
    )
    server = LineServer(UNBOUNDED)
    driver = StreamingDriver(spark, tracker=tracker.address, batch_interval_ms=INTERVAL_MS, backpressure=False)
    driver.add_listener(Listener())
    driver.foreach_batch(lambda batch: batch.rdd.map(per_record).sum()).start()
    receiver = start_service(
        receiver_argv(
            tracker.address,
            source="socket",
            block_store=(tmp / "blocks").as_uri(),
            block_interval_ms=BLOCK_MS,
            receiver_id="vs-spark",
            extra=["--socket-port", str(server.port), *(["--max-rate", str(max_rate)] if max_rate else [])],
        ),
        log=tmp / "receiver.log",
    )
    try:
        if not server.connected.wait(60):
            raise RuntimeError(f"the receiver did not connect: {(tmp / 'receiver.log').read_text()[-2000:]}")
        until_records(batches, seconds)
    finally:
        driver.stop(graceful=False)
        stop_process(receiver)
        tracker.stop()
        server.stop()
    return sustained(batches, INTERVAL_MS, warm_up)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--seconds", type=float, default=None, help="seconds per run after connecting (default 12)")
    p.add_argument("--probes", type=int, default=3, help="probe runs per system that find its cap (none: --quick)")
    args = options(p)
    seconds = args.seconds or (4.0 if args.quick else 12.0)
    warm_up = 0 if args.quick else WARM_UP_BATCHES  # a smoke run has no batch to spare
    spark = spark_session("sluice-bench-vs-spark", log_level="OFF")
    spark.sparkContext.parallelize(["a b"] * 4, 2).map(per_record).sum()  # start the Python workers once
    processing: dict[str, list[float]] = {"sluice": [], "spark": []}
    caps: dict[str, float | None] = {name: QUICK_CAP if args.quick else None for name in ("sluice", "spark")}
    try:
        with tempfile.TemporaryDirectory(prefix="sluice-bench-vs-spark-") as tmp:

            def one(
                name: str, r: int | str, max_rate: float | None, run_seconds: float, skip: int
            ) -> tuple[float, float]:
                if name == "sluice":
                    return run_sluice(spark, run_seconds, skip, max_rate, Path(tmp) / f"r{r}")
                return run_spark(spark, run_seconds, skip, max_rate)

            for name in caps:
                for k in range(0 if args.quick else args.probes):
                    rate, busy = one(name, f"probe{k}-{name}", caps[name], 5.0, 0)
                    say(
                        f"  probe {k + 1} at {'no cap' if caps[name] is None else f'{caps[name]:,.0f}'}: {name} "
                        f"{rate:,.0f} records/s, median processing {busy:.2f} intervals"
                    )
                    caps[name] = rate / busy if busy < 1 else rate  # processed in one interval
                if caps[name] is not None:
                    say(f"  {name}'s receiver is capped at {caps[name]:,.0f} records/s")

            def side(name: str):
                def run(r: int) -> float:
                    rate, busy = one(name, r, caps[name], seconds, warm_up)
                    processing[name].append(round(busy, 3))
                    say(
                        f"  round {r + 1}: {name} {rate:,.0f} records/s sustained, median processing "
                        f"{busy:.2f} intervals"
                    )
                    return rate

                return run

            values = alternate(args.rounds, {"sluice": side("sluice"), "spark": side("spark")})
    finally:
        spark.stop()
    line = figure(
        "vs_spark",
        "sustained records/s, socket source, same per-record function",
        "records/s",
        values["sluice"],
        peer=values["spark"],
        peer_name="Spark socketTextStream, backpressure off",
        target=">= 2",
        digits=0,
        interval_ms=INTERVAL_MS,
        block_ms=BLOCK_MS,
        seconds=seconds,
        processing_intervals=processing["sluice"],
        peer_processing_intervals=processing["spark"],
        receiver_max_rate=caps["sluice"],
        peer_receiver_max_rate=caps["spark"],
    )
    say(
        f"Sluice {line['median']:,.0f} records/s ({line['min']:,.0f}-{line['max']:,.0f}) vs Spark "
        f"{line['peer']['median']:,.0f} ({line['peer']['min']:,.0f}-{line['peer']['max']:,.0f}): ratio "
        f"{line['ratio']:.2f} (target >= 2: {'met' if line['met'] else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
