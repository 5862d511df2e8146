"""End-to-end latency: a record produced to Kafka -> seen by the batch function, p50 and p99.

The pipeline is the real one: the embedded broker, a ``sluice-tracker`` (fsync on), a
``sluice-receiver`` (Kafka source, 200 ms blocks, ``file://`` store) and the ``StreamingDriver``
(1 s batches, backpressure off) whose batch function reads every block in Spark tasks.  A
producer process writes records at a fixed rate; Kafka's record timestamp (set when the producer
appends it) is when it was produced, and a task notes when it saw it (wall clock, one machine).

Capacity is measured first, in the same run: the producer process writes as fast as it can while
the pipeline reads (the producer shares the 2 cores in every run, so it does here), and the
pipeline's sustained records/s (``sum(records) / sum(max(processing, interval))`` over the batches
after the first) is the 100 %; the latency runs then produce at 50 % and 80 % of it, alternating,
``--rounds`` each.  After the producer stops, every sampled record it wrote is waited for (30 s at
most); one never seen counts as later than all, so a pipeline that fell behind shows as a
percentile not reached, never as a good one.

Where the time goes, per record (sampled, every ``--sample``-th offset), the parts adding up to
its latency:

* block: produced -> its block's cut, the end of the block interval it was stored in less the
  receiver's ``block_lead_ms`` (fetch + waiting for the cut);
* allocation wait: the block's cut -> the batch time that allocated it (waiting for the tick);
* scheduling: the batch time -> the batch function started (allocate RPC, RDD, queue);
* task start: the function started -> the task saw the record (job, task launch, block read).

From the stamps each block and batch carry (:mod:`sluice.stages`), every JSON line also has
``stage_ms``: per stage of a record's way (broker, limiter, buffer, store, report, allocation wait,
allocate, submit, queue, launch, task, finish, and the total), the median over the batches of
their p50 and p99.

Target: p99 <= 2 intervals.

    .venv/bin/python bench/latency.py [--quick] [--rounds 5] [--seconds 10] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import asyncio
import bisect
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import add_bootstrap, figure, kafka, options, order, parser, produce, report, say, spark_session

from sluice.embedded import receiver_argv, start_service, start_tracker, stop_process
from sluice.settings import ReceiverSettings

INTERVAL_MS = 1000
BLOCK_MS = 200
CUT_MS = BLOCK_MS - min(ReceiverSettings().block_lead_ms, BLOCK_MS / 2)  # a block's cut, after its start
PARTITIONS = 4
PARTS = ("block", "allocation_wait", "scheduling", "task_start")
FLAT_OUT = 1e7  # records/s: the producer writes as fast as it can (at most 20,000 records a step)


def wall_ms() -> float:
    return time.time() * 1000.0


def produce_at(bootstrap: str, topic: str, rate: float, seconds: float, produced: Any) -> None:
    """A producer process: ``rate`` records/s for ``seconds``, in 10 ms steps over the partitions;
    the records produced per partition go into ``produced`` (a shared array).  Every send's
    delivery is checked (each step the finished ones, at the end all): a refused batch fails the
    bench instead of showing as records that never arrive."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, max_batch_size=1 << 20)
        await producer.start()
        pending: list[asyncio.Future[Any]] = []
        try:
            start, sent, i = time.monotonic(), 0, 0
            while (elapsed := time.monotonic() - start) < seconds:
                due = min(int(rate * elapsed) - sent, 20_000)
                for partition in range(PARTITIONS):
                    share = due // PARTITIONS + (1 if partition < due % PARTITIONS else 0)
                    while share:
                        batch = producer.create_batch()
                        while (
                            share and batch.append(key=None, value=b"%09d" % i + b"x" * 91, timestamp=None) is not None
                        ):
                            i += 1
                            share -= 1
                            produced[partition] += 1
                        batch.close()
                        pending.append(await producer.send_batch(batch, topic, partition=partition))
                sent += due
                for delivery in pending:
                    if delivery.done():
                        delivery.result()  # raises the broker's refusal
                pending = [f for f in pending if not f.done()]
                await asyncio.sleep(0.01)
            await asyncio.gather(*pending)
        finally:
            await producer.stop()

    asyncio.run(run())


def seen_in_task(sample: int):
    """The task's function: (partition, offset, produced ms, seen ms) of every ``sample``-th offset
    but 0 (the primer)."""

    def per_partition(records: Any) -> Any:
        now = time.time() * 1000.0
        return [
            (r.partition, r.offset, r.timestamp_ms, now) for r in records if r.offset % sample == 0 and r.offset > 0
        ]

    return per_partition


class Recorder:
    """Per record sampled: its latency and the four parts; per batch: records and processing."""

    def __init__(self, sample: int) -> None:
        self.sample = sample
        self.expected = 0  # sampled records the producer wrote
        self.produced = 0  # records it wrote
        self.seconds = 0.0  # how long it took to write them
        self.rows: list[tuple[float, ...]] = []  # total, block, allocation wait, scheduling, task start
        self.batches: list[tuple[int, int, float]] = []
        self.stages: list[dict[str, dict[str, float]]] = []  # per batch: each stage's p50 and p99 (sluice.stages)

    def __call__(self, batch: Any) -> None:
        started = wall_ms()
        # a record's block by its offset: a batch of fewer blocks than cores reads its blocks in slices
        # (sluice.spark_driver.block_rdd), so a task's index is not a block's
        starts = {
            (r.partition, r.from_offset): (r.until_offset, _block_start(b.block_id))
            for b in batch.blocks
            for r in b.offset_ranges
        }
        firsts = {p: sorted(f for q, f in starts if q == p) for p, _ in starts}
        for partition, offset, produced, seen in batch.rdd.mapPartitions(seen_in_task(self.sample)).collect():
            at = firsts[partition][bisect.bisect_right(firsts[partition], offset) - 1]
            until, start = starts[(partition, at)]
            assert at <= offset < until, f"offset {offset} of partition {partition} in no block of the batch"
            end = start + CUT_MS if start is not None else batch.time_ms
            self.rows.append(
                (seen - produced, end - produced, batch.time_ms - end, started - batch.time_ms, seen - started)
            )


def _block_start(block_id: str) -> int | None:
    """A block's interval start, from its id ``input-<stream>-<receiver>-<start ms>[suffix]``."""
    digits = block_id.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Pipeline:
    """Tracker, receiver and driver on one topic, (re)started per run with a fresh consumer group."""

    def __init__(self, spark: Any, bootstrap: str, tmp: Path) -> None:
        self.spark, self.bootstrap, self.tmp = spark, bootstrap, tmp
        self.runs = 0

    def run(self, topic: str, recorder: Recorder, seconds: float, *, during=None) -> None:
        from sluice.spark_driver import StreamingDriver

        self.runs += 1
        tmp = self.tmp / f"run{self.runs}"
        tmp.mkdir()

        class Listener:
            def on_batch_completed(self, info) -> None:
                if info.processing_delay_ms is not None:
                    recorder.batches.append((info.batch_time_ms, info.num_records, float(info.processing_delay_ms)))
                if info.stages:
                    recorder.stages.append(info.stages)

        tracker = start_tracker(tmp / "wal", args=["--log-level", "WARNING"], block_store=(tmp / "blocks").as_uri())
        driver = StreamingDriver(self.spark, tracker=tracker.address, batch_interval_ms=INTERVAL_MS, backpressure=False)
        driver.add_listener(Listener())
        driver.foreach_batch(recorder).start()
        receiver = start_service(
            receiver_argv(
                tracker.address,
                bootstrap=self.bootstrap,
                topic=topic,
                group=f"latency-{self.runs}-{time.time_ns()}",
                block_store=(tmp / "blocks").as_uri(),
                block_interval_ms=BLOCK_MS,
                receiver_id="latency",
            ),
            log=tmp / "receiver.log",
        )
        try:
            if during is not None:
                during()
            else:
                time.sleep(seconds)
        finally:
            driver.stop(graceful=False)
            stop_process(receiver)
            tracker.stop()


def first_records(recorder: Recorder, timeout: float = 60.0) -> None:
    """Wait until a batch held records: the receiver has joined its consumer group (seconds)."""
    deadline = time.monotonic() + timeout
    while not any(n for _, n, _ in list(recorder.batches)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no batch held records within {timeout:.0f} s")
        time.sleep(0.05)


def capacity(pipeline: Pipeline, seconds: float, warm_up: int) -> float:
    """Records/s the pipeline sustains while the producer process writes as fast as it can (the
    producer shares the machine in the latency runs too, so it does here)."""
    recorder = Recorder(sample=10**9)
    produce_while(pipeline, recorder, FLAT_OUT, seconds, wait=False)
    steady = sorted(b for b in recorder.batches if b[1] > 0)[warm_up:]
    if not steady:
        raise RuntimeError(f"no batch held records: {sorted(recorder.batches)}")
    return sum(n for _, n, _ in steady) / sum(max(p, INTERVAL_MS) for _, _, p in steady) * 1000


def produce_while(pipeline: Pipeline, recorder: Recorder, rate: float, seconds: float, wait: bool) -> None:
    """Produce at ``rate`` for ``seconds`` into a fresh topic while the pipeline reads it, once a
    first record per partition has come through (the consumer group has joined; not timed); with
    ``wait``, then wait (up to 30 s) until every sampled record was seen."""
    topic = f"latency-{time.time_ns()}"
    asyncio.run(produce(pipeline.bootstrap, topic, PARTITIONS, PARTITIONS))

    def during() -> None:
        first_records(recorder)
        time.sleep(1.5 * INTERVAL_MS / 1000)
        recorder.rows.clear()
        recorder.batches.clear()
        recorder.stages.clear()
        context = multiprocessing.get_context("spawn")
        produced = context.Array("q", PARTITIONS)
        producer = context.Process(
            target=produce_at, args=(pipeline.bootstrap, topic, rate, seconds, produced), daemon=True
        )
        producer.start()
        producer.join(seconds + 60)
        recorder.seconds = seconds  # the producer's own loop ran this long
        recorder.produced = sum(produced[:])
        # the producer wrote offsets 1..n of each partition (0 was the primer); multiples of sample are timed
        recorder.expected = sum(produced[p] // recorder.sample for p in range(PARTITIONS))
        deadline = time.monotonic() + (30 if wait else 0)
        while len(recorder.rows) < recorder.expected and time.monotonic() < deadline:
            time.sleep(0.1)

    pipeline.run(topic, recorder, seconds, during=during)


def latency_percentile(rec: Recorder, q: float) -> float | None:
    """The ``q`` quantile of the latencies of every sampled record the producer wrote; a record
    not seen within 30 s of the producer's end counts as later than all: None if it decides."""
    seen = sorted(row[0] for row in rec.rows)
    k = int(q * max(rec.expected, len(seen)))
    return seen[min(k, len(seen) - 1)] if seen and k < len(seen) else None


def stage_medians(recorders: list[Recorder]) -> dict[str, dict[str, float]]:
    """Per stage of a record's way (sluice.stages, in order), the median over the batches of their
    p50 and of their p99, from the driver's own stamps (``BatchInfo.stages``)."""
    per_stage: dict[str, dict[str, list[float]]] = {}
    for rec in recorders:
        for batch in rec.stages:
            for stage, times in batch.items():
                for q, value in times.items():
                    per_stage.setdefault(stage, {}).setdefault(q, []).append(value)
    return {
        stage: {q: round(statistics.median(values), 1) for q, values in qs.items()} for stage, qs in per_stage.items()
    }


def _ms(value: float | None) -> str:
    return "not reached" if value is None else f"{value:,.0f} ms"


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--seconds", type=float, default=None, help="seconds of producing per run (default 10)")
    p.add_argument("--sample", type=int, default=None, help="every N-th offset is timed (default: ~2,000 a batch)")
    p.add_argument("--capacity", type=float, default=None, help="records/s taken as 100 %% (default: measured)")
    add_bootstrap(p)
    args = options(p)
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    with kafka(args.bootstrap) as bootstrap:
        spark = spark_session("sluice-bench-latency")
        try:
            with tempfile.TemporaryDirectory(prefix="sluice-bench-latency-") as tmp:
                pipeline = Pipeline(spark, bootstrap, Path(tmp))
                full = args.capacity or capacity(pipeline, 2.0 if args.quick else 8.0, warm_up=0 if args.quick else 1)
                say(f"capacity (the producer writing flat out beside it): {full:,.0f} records/s")
                loads = {"80%": 0.8} if args.quick else {"50%": 0.5, "80%": 0.8}  # a smoke run: one load
                results: dict[str, list[Recorder]] = {name: [] for name in loads}
                for r in range(args.rounds):
                    for name in order(r, list(loads)):
                        rate = full * loads[name]
                        sample = args.sample or max(1, int(rate * INTERVAL_MS / 1000 / 2000))
                        rec = Recorder(sample)
                        produce_while(pipeline, rec, rate, seconds, wait=True)
                        results[name].append(rec)
                        say(
                            f"  round {r + 1}, {name} ({rate:,.0f} records/s asked, {rec.produced / rec.seconds:,.0f} "
                            f"produced): {len(rec.rows)} of {rec.expected} sampled records seen, p50 "
                            f"{_ms(latency_percentile(rec, 0.5))}, p99 {_ms(latency_percentile(rec, 0.99))}"
                        )
        finally:
            spark.stop()
    for name, recorders in results.items():
        parts = {
            part: round(statistics.median(percentile([row[i + 1] for row in rec.rows], 0.5) for rec in recorders), 1)
            for i, part in enumerate(PARTS)
        }
        stages = stage_medians(recorders)
        say(f"{name} of capacity, per stage (median of the batches' p50 / p99, ms):")
        for stage, times in stages.items():
            say(f"  {stage:>16}: {times.get('p50', 0):8.1f} / {times.get('p99', 0):8.1f}")
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            found = [latency_percentile(rec, q) for rec in recorders]
            if None in found:  # too many records never seen: the pipeline did not keep up
                report(
                    "latency",
                    figure=f"{label} produced -> seen by the batch function, {name} of capacity",
                    unit="ms",
                    median=None,
                    runs=found,
                    met=False if label == "p99" else None,
                    note="records not seen within 30 s of the producer's end decide this percentile",
                    unseen_records=[rec.expected - len(rec.rows) for rec in recorders],
                    expected_records=[rec.expected for rec in recorders],
                )
                say(f"{name} of capacity, {label}: not reached in {found.count(None)} of {len(found)} runs")
                continue
            values = [v for v in found if v is not None]
            line = figure(
                "latency",
                f"{label} produced -> seen by the batch function, {name} of capacity",
                "ms",
                values,
                digits=1,
                target=f"<= {2 * INTERVAL_MS}" if label == "p99" else None,
                target_of="median",
                capacity_records_per_s=round(full),
                rate_records_per_s=round(full * loads[name]),
                interval_ms=INTERVAL_MS,
                block_ms=BLOCK_MS,
                seconds=seconds,
                median_parts_ms=parts,
                stage_ms=stages,
                timed_records=[len(rec.rows) for rec in recorders],
                unseen_records=[rec.expected - len(rec.rows) for rec in recorders],
                produced_records_per_s=[round(rec.produced / rec.seconds) for rec in recorders],
            )
            say(
                f"{name} of capacity, {label}: median {line['median']:,.0f} ms ({line['min']:,.0f}-{line['max']:,.0f})"
                + (
                    f" (target <= {2 * INTERVAL_MS} ms: {'met' if line['met'] else 'MISSED'})"
                    if label == "p99"
                    else f"; median of each part (ms): {parts}"
                )
            )


if __name__ == "__main__":
    main()
