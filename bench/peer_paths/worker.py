"""One run of one path in its own process (``peers.py --worker SPEC``): the path reads its topic
into the sink until every record is there, then prints one JSON line: count, checksum, seconds from
the first record into the function to the last output, the tree's CPU seconds over that window and
peak RSS, and in a rate run the latencies' p50 and p99.

Two kinds of run:

* backlog: the topic already holds ``records`` records (:func:`produce_backlog`);
* rate: the topic is empty; once the path is up, a producer process (not counted in RSS or CPU)
  appends ``warm_records`` at once, and only when the path has output every one of them (its group
  joined, its first job's workers started: costs a long-running deployment pays once) the rest at
  ``rate`` records/s (:func:`produce_at`).  The percentiles hold the records produced from
  ``WARM_UP`` seconds into that timed part on; ``offered_rate`` is the rate it really had.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peer_paths.work import Sink, TreeMeter, per_record, value

WARM_UP = 1.0
TIMEOUT = 600.0


@dataclass
class Context:
    """What a path needs: where to read, the function, the sink; ``wait`` blocks until it is done."""

    bootstrap: str
    topic: str
    partitions: int
    group: str
    fn: Callable[[Any], tuple[int, int, float]]
    sink: Sink
    tmp: Path
    interval_ms: int
    tail: bool  # a rate run's topic never ends; a backlog run's ends at its last record
    deadline: float
    max_batch_partitions: int = 0  # the receiver path's driver.max_batch_partitions

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"{self.sink.count} of {self.sink.expected} records after {TIMEOUT:.0f} s")

    def wait(self, diagnosis: Callable[[], str]) -> None:
        while not self.sink.done.wait(0.2):
            if time.monotonic() > self.deadline:
                raise TimeoutError(f"{self.sink.count} of {self.sink.expected} records: {diagnosis()}")


async def _append(producer: Any, topic: str, partitions: int, first: int, count: int) -> list:
    """Append records ``first..first+count-1`` round-robin over the partitions, in whole batches."""
    futures, per = [], [list(range(first + p, first + count, partitions)) for p in range(partitions)]
    for partition, numbers in enumerate(per):
        while numbers:
            batch = producer.create_batch()
            while numbers and batch.append(key=None, value=value(numbers[0], time.time()), timestamp=None) is not None:
                numbers.pop(0)
            batch.close()
            futures.append(await producer.send_batch(batch, topic, partition=partition))
    return futures


def produce_backlog(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    from aiokafka import AIOKafkaProducer

    from sluice.embedded import create_topic

    async def run() -> None:
        await create_topic(bootstrap, partitions, topic)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20)
        await producer.start()
        try:
            for first in range(0, records, 50_000):
                await asyncio.gather(*await _append(producer, topic, partitions, first, min(50_000, records - first)))
        finally:
            await producer.stop()

    asyncio.run(run())


def produce_at(
    bootstrap: str, topic: str, partitions: int, rate: float, records: int, warm: int, go: Any, offered: Any
) -> None:
    """Records ``0..warm-1`` at once; once ``go`` is set, the rest up to ``records`` at ``rate``
    records/s in 10 ms steps, the rate they had put in ``offered`` (a process of its own)."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, max_batch_size=1 << 20)
        await producer.start()
        try:
            if warm:
                await asyncio.gather(*await _append(producer, topic, partitions, 0, warm))
            await asyncio.get_running_loop().run_in_executor(None, go.wait)
            start, sent = time.monotonic(), warm
            while sent < records:
                due = min(warm + int(rate * (time.monotonic() - start)), records) - sent
                if due > 0:
                    await _append(producer, topic, partitions, sent, due)
                    sent += due
                await asyncio.sleep(0.01)
            await producer.flush()
            offered.value = (records - warm) / max(time.monotonic() - start, 1e-9)
        finally:
            await producer.stop()

    asyncio.run(run())


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def warm_up(run_path: Callable[..., None], spark: Any, ctx: Context, topic: str, records: int) -> None:
    """The path once over a small topic of its own in the same Spark session, before the timed run:
    Spark's Python workers are forked and import the path's modules during an application's first
    tasks (a source's reader and a ``mapInArrow`` function each in a worker of its own), a cost a
    long-running query pays once.  A peer pays its own before its first record, outside the window."""
    tmp = ctx.tmp / "warm-up"
    tmp.mkdir()
    warm = dataclasses.replace(ctx, topic=topic, group=f"{ctx.group}-warm", sink=Sink(records), tmp=tmp, tail=False)
    run_path(spark, warm, lambda: None)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    from peer_paths import python_peers, spark_paths

    meter = TreeMeter(roots=spec.get("meter_roots", ())).start()
    sink = Sink(spec["records"])
    rate = spec.get("rate")
    with tempfile.TemporaryDirectory(prefix="sluice-bench-peers-") as tmp:
        ctx = Context(
            bootstrap=spec["bootstrap"],
            topic=spec["topic"],
            partitions=spec["partitions"],
            group=f"peers-{uuid.uuid4().hex[:10]}",
            fn=per_record(spec["weight"], spec["spins"]),
            sink=sink,
            tmp=Path(tmp),
            interval_ms=spec["interval_ms"],
            tail=rate is not None,
            deadline=time.monotonic() + TIMEOUT,
            max_batch_partitions=spec.get("max_batch_partitions", 0),
        )
        producer: multiprocessing.process.BaseProcess | None = None
        spawn = multiprocessing.get_context("spawn")
        # A rate run's handshake with its producer, made only then: a semaphore starts
        # multiprocessing's resource tracker, one more process in the tree a backlog run measures.
        go = spawn.Event() if rate is not None else None
        offered = spawn.Value("d", 0.0) if rate is not None else None
        sink.warm_count, sink.warmed = spec.get("warm_records", 0), go

        def ready() -> None:
            nonlocal producer
            if rate is None:
                return
            args = (ctx.bootstrap, ctx.topic, ctx.partitions, rate, spec["records"], sink.warm_count, go, offered)
            producer = spawn.Process(target=produce_at, args=args, daemon=True)
            producer.start()
            meter.exclude.add(producer.pid or 0)

        path = spec["path"]
        started = time.time()
        if path in spark_paths.PATHS:
            with spark_paths.session(spec["master"], spec.get("spark_conf")) as spark:
                if spec.get("warm_topic"):
                    warm_up(spark_paths.PATHS[path], spark, ctx, spec["warm_topic"], spec["warm_topic_records"])
                spark_paths.PATHS[path](spark, ctx, ready)
        else:
            python_peers.PATHS[path](ctx, ready)
        if producer is not None:
            producer.join(30)
        meter.stop()
    out = sink.result()
    out["cpu_seconds"] = meter.cpu_between(out["first"], out["last"])
    out["peak_rss_mb"] = meter.peak_rss / 2**20
    out["processes"] = meter.processes
    out["wall_seconds"] = time.time() - started
    if rate is not None:
        steady = [ms for produced, ms in sink.latencies if produced >= (sink.warmed_at or 0.0) + WARM_UP]
        out.update(p50_ms=percentile(steady, 0.5), p99_ms=percentile(steady, 0.99), samples=len(steady))
        out["offered_rate"] = offered.value if offered is not None else None
        out["mean_ms"] = statistics.fmean(steady) if steady else None
    return out


def end_tree(why: str, status: int) -> None:
    """End this worker and every process it started (a JVM, a tracker, a receiver), now."""
    import psutil

    print(why, file=sys.stderr, flush=True)
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass
    os._exit(status)


def orphaned(parent: int) -> None:
    """A worker whose bench was killed (a smoke run's timeout) ends with its tree instead of running on."""
    while os.getppid() == parent:
        time.sleep(1.0)
    end_tree("the bench is gone: stopping", 4)


def main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    watchdog = threading.Timer(TIMEOUT + 60, end_tree, args=("worker timed out", 3))
    watchdog.daemon = True
    watchdog.start()
    threading.Thread(target=orphaned, args=(os.getppid(),), daemon=True).start()
    out = run(spec)
    print(json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)  # a peer's threads (librdkafka, Spark's gateway) must not hold the exit
