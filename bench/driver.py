"""Driver benchmark: tick-to-submit latency, block RDD vs ``sc.parallelize``, and the backpressure run.

    .venv/bin/python bench/driver.py [--quick] [--rounds 5] [--records 200000] [--blocks 20] [--skip-backpressure]

1. *Tick -> job submitted*: a real ``sluice-tracker`` and a generator ``sluice-receiver``; for each
   batch, ``submission_time - batch_time`` (the allocate_blocks round trip plus building the RDD).
2. *Block RDD vs parallelize*: the same records, once stored as blocks and read by the tasks
   (one partition per block, CRC checked), once shipped from the driver with ``sc.parallelize``
   into as many partitions; the same simple function over both.  Ratio target <= 1.2.  Twice:
   blocks in the block format's columns (what other sources and deserializing receivers store), and
   blocks of Kafka record batches as a broker sends them (what the Kafka receiver stores; the tasks
   decode each record with aiokafka's parser and check each batch's CRC).
3. *Backpressure*: the run of :mod:`sluice.demo.backpressure` (fixed cost per record, input
   offered at 3x capacity) under Spark's PID and ``adaptive``, ``--rounds`` runs each, the order
   rotating each round, after one unmeasured warm-up run: batches to steady state, batches at the
   minimum rate, peak scheduling delay, steady throughput against capacity; medians and spread,
   the PID the peer.

One JSON line per figure as it comes; the machine is shared, so the peer of each comparison runs in
the same process, in alternating rounds, and medians are compared.  ``--quick`` skips the
backpressure run (minutes).
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path

from harness import alternate, fields_figure, figure, options, order, parser, say, spark_session

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.kafka.record_batches import batch_pieces
from sluice.records import Record
from sluice.spark_driver.block_rdd import block_rdd
from sluice.storage.block_store import Block, FileBlockStore

RECORDS_PER_BATCH = 1_000  # a producer batch of 16 KiB (its default) holds ~1,000 of these small records


def simple(record: Record) -> int:
    """The 'simple function': a little work per record."""
    return len(record.value or b"") + record.offset % 7


def record_batches(records: list[Record]) -> bytes:
    """``records`` (consecutive offsets) as Kafka v2 record batches, built by aiokafka's producer code."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    out = bytearray()
    for start in range(0, len(records), RECORDS_PER_BATCH):
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        for delta, r in enumerate(records[start : start + RECORDS_PER_BATCH]):
            builder.append(delta, timestamp=r.timestamp_ms, key=r.key, value=r.value, headers=[])
        batch = builder.build()
        batch[0:8] = records[start].offset.to_bytes(8, "big")  # the base offset a broker assigns
        out += batch
    return bytes(out)


def make_blocks(tmp: Path, records: int, blocks: int, kind: str) -> tuple[list[ReceivedBlockInfo], list[list[Record]]]:
    """``kind``: ``columns`` (the block format's columns) or ``batches`` (Kafka record batches)."""
    store = FileBlockStore(tmp / "blocks")
    per_block = records // blocks
    infos, data = [], []
    for b in range(blocks):
        start = b * per_block
        recs = [
            Record(None, f"value-{start + i:09d}".encode(), "bench", b, start + i, 1_700_000_000_000)
            for i in range(per_block)
        ]
        ranges = (OffsetRange("bench", b, start, start + per_block),)
        stored = (
            recs
            if kind == "columns"
            else list(batch_pieces("bench", b, record_batches(recs), start, lambda: per_block))
        )
        location = store.write(Block(0, f"bench-{b}", stored, ranges))
        infos.append(ReceivedBlockInfo(0, f"bench-{b}", "bench", per_block, location, ranges))
        data.append(recs)
    return infos, data


#: ``driver.max_batch_partitions`` of the grouped figure: the two cores of local[2].
GROUPED = 2


def bench_block_rdd(spark, records: int, blocks: int, rounds: int, kind: str) -> None:
    sc = spark.sparkContext
    with tempfile.TemporaryDirectory() as tmp:
        infos, data = make_blocks(Path(tmp), records, blocks, kind)
        flat = [r for recs in data for r in recs]
        expected = sum(simple(r) for r in flat)
        # warm up both paths (worker start, imports)
        block_rdd(sc, infos).map(simple).sum()
        block_rdd(sc, infos, max_partitions=GROUPED).map(simple).sum()
        sc.parallelize(flat, blocks).map(simple).sum()

        def timed(make) -> float:
            t0 = time.perf_counter()
            assert make().map(simple).sum() == expected
            return (time.perf_counter() - t0) * 1000

        values = alternate(
            rounds,
            {
                "block": lambda r: timed(lambda: block_rdd(sc, infos)),
                "grouped": lambda r: timed(lambda: block_rdd(sc, infos, max_partitions=GROUPED)),
                "parallelize": lambda r: timed(lambda: sc.parallelize(flat, blocks)),
            },
        )
    stored_as = {"columns": "block format columns", "batches": "Kafka record batches"}[kind]
    line = figure(
        "driver",
        f"block RDD job time ({stored_as})",
        "ms",
        values["block"],
        peer=values["parallelize"],
        peer_name="sc.parallelize of the same records",
        target="<= 1.2",
        digits=1,
        records=records,
        partitions=blocks,
    )
    say(
        f"block RDD ({stored_as}) vs parallelize ({records} records, {blocks} partitions, median of {rounds}): "
        f"block {line['median']:.0f} ms, parallelize {line['peer']['median']:.0f} ms, ratio {line['ratio']:.2f} "
        f"(target <= 1.2: {'met' if line['met'] else 'MISSED'})"
    )
    grouped = figure(
        "driver",
        f"block RDD job time, blocks in {GROUPED} partitions (driver.max_batch_partitions) ({stored_as})",
        "ms",
        values["grouped"],
        peer=values["block"],
        peer_name="one partition per block",
        digits=1,
        records=records,
        blocks=blocks,
    )
    say(f"grouped into {GROUPED}: {grouped['median']:.0f} ms against {grouped['peer']['median']:.0f} ms one per block")


def bench_tick_to_submit(spark, tmp: Path, batches: int = 10) -> None:
    from sluice.embedded import receiver_argv, start_service, start_tracker, stop_process
    from sluice.spark_driver import StreamingDriver

    tracker = start_tracker(tmp / "wal", args=["--no-fsync"], block_store=(tmp / "blocks").as_uri())
    receiver = start_service(
        receiver_argv(
            tracker.address,
            source="generator",
            block_store=(tmp / "blocks").as_uri(),
            block_interval_ms=200,
            receiver_id="tick",
            extra=["--generator-rate", "20000"],
        ),
        log=tmp / "receiver.log",
    )
    infos = []
    done = threading.Event()

    class Listener:
        def on_batch_submitted(self, info) -> None:
            infos.append(info)
            if len(infos) >= batches:
                done.set()

    driver = StreamingDriver(spark, tracker=tracker.address, batch_interval_ms=500, backpressure=False)
    driver.add_listener(Listener())
    driver.foreach_batch(lambda batch: batch.rdd.count()).start()
    try:
        done.wait(120)
        if max((i.num_records for i in infos), default=0) == 0:
            say("receiver log:", (tmp / "receiver.log").read_text()[-3000:])
    finally:
        driver.stop(graceful=False)
        stop_process(receiver)
        tracker.stop()
    lat = [i.submission_time_ms - i.batch_time_ms for i in infos]
    blocks = [i.num_records for i in infos]
    figure(
        "driver",
        "tick -> job submitted (allocate_blocks RPC + block RDD), per batch",
        "ms",
        lat,
        digits=0,
        batches=len(lat),
        records_per_batch_median=statistics.median(blocks),
    )
    say(
        f"tick -> job submitted over {len(lat)} batches (tracker RPC + block RDD): median "
        f"{statistics.median(lat):.0f} ms, max {max(lat)} ms; records per batch median {statistics.median(blocks):.0f}"
    )


def backpressure_figures(infos: list) -> dict:
    """Batches to steady state, peak scheduling delay and steady throughput of one real run."""
    from sluice.demo.backpressure import INTERVAL_MS, settled

    steady_from = None
    for i in range(len(infos)):
        rest = infos[i:]
        if len(rest) >= 5 and all(
            0.8 * INTERVAL_MS <= x.processing_delay_ms <= 1.2 * INTERVAL_MS and x.scheduling_delay_ms < INTERVAL_MS / 2
            for x in rest
        ):
            steady_from = i
            break
    return {
        "steady_from": steady_from,
        "peak_ms": max(x.scheduling_delay_ms for x in infos),
        "at_min": sum(1 for x in infos if 0 < x.num_records <= 100),
        **settled(infos),
    }


BACKPRESSURE_FIELDS = ("steady_from", "peak_ms", "at_min", "throughput", "processing_median_ms")


def bench_backpressure(
    spark, tmp: Path, estimators: tuple[str, ...] = ("pid", "adaptive"), rounds: int = 5, batches: int = 40
) -> None:
    """The same real pipeline under each estimator, ``rounds`` times, the order rotating each round,
    after one unmeasured warm-up run (JVM, Python workers, the tracker and receiver code paths), so
    neither estimator pays Spark's start; the first estimator (Spark's PID) is the peer."""
    from sluice.demo.backpressure import CAPACITY, INTERVAL_MS, run_backpressure

    (tmp / "warm-up").mkdir()
    run_backpressure(spark, tmp / "warm-up", batches=6, timeout=120, estimator=estimators[0])
    runs: dict[str, list[dict]] = {name: [] for name in estimators}
    for r in range(rounds):
        for name in order(r, list(estimators)):
            (tmp / f"{name}-{r}").mkdir()
            infos = run_backpressure(spark, tmp / f"{name}-{r}", batches=batches, timeout=300, estimator=name)
            f = backpressure_figures(infos)
            runs[name].append({k: f[k] for k in BACKPRESSURE_FIELDS})
            say(
                f"round {r + 1}, {name} (capacity {CAPACITY:.0f} records/s, offered 3x, {INTERVAL_MS} ms batches): "
                f"steady after {f['steady_from'] if f['steady_from'] is not None else 'never'} of {len(infos)} "
                f"batches, {f['at_min']} at the minimum rate, peak scheduling delay {f['peak_ms']} ms, steady "
                f"{f['throughput'] / CAPACITY:.2f} x capacity"
            )
    peer_name = estimators[0]
    for name in estimators:
        line = fields_figure(
            "driver",
            f"backpressure run, {name}",
            runs[name],
            BACKPRESSURE_FIELDS,
            peer_runs=runs[peer_name] if name != peer_name else None,
            peer_name=peer_name if name != peer_name else None,
            capacity_records_per_s=CAPACITY,
            interval_ms=INTERVAL_MS,
        )
        ratio = f"; ratio to {peer_name} {line['ratio']}" if "ratio" in line else ""
        say(f"{name}: medians {line['median']}{ratio}")


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--records", type=int, default=None, help="default 200,000; --quick 4,000")
    p.add_argument("--blocks", type=int, default=None, help="default 20; --quick 4")
    p.add_argument("--skip-backpressure", action="store_true")
    p.add_argument(
        "--estimators",
        default="pid,adaptive",
        help="estimators for the backpressure run, the first one the peer (default pid,adaptive)",
    )
    p.add_argument("--only", choices=("tick", "rdd", "backpressure"), help="run one part only")
    args = options(p)
    records, blocks = args.records or (4_000 if args.quick else 200_000), args.blocks or (4 if args.quick else 20)
    spark = spark_session("sluice-bench-driver")
    try:
        if args.only in (None, "tick"):
            with tempfile.TemporaryDirectory(prefix="sluice-bench-driver-") as tmp:
                bench_tick_to_submit(spark, Path(tmp), batches=3 if args.quick else 10)
        if args.only in (None, "rdd"):
            for kind in ("columns", "batches"):
                bench_block_rdd(spark, records, blocks, args.rounds, kind)
        if args.only in (None, "backpressure") and not args.skip_backpressure and not args.quick:
            with tempfile.TemporaryDirectory() as tmp:
                bench_backpressure(spark, Path(tmp), tuple(args.estimators.split(",")), args.rounds)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
