"""Benchmark: a Sluice receiver against its peers, measured in the same run on the same machine.

1. Throughput: one receiver (KafkaReceiver → limiter → blocks → file store with fsync → real
   ``sluice-tracker`` with its fsynced WAL → acknowledged), records/s from its first record to the
   acknowledgement of the last, against a plain aiokafka ``getmany`` loop reading the same topic on
   the same tansu broker.  Rounds alternate the two; medians are compared.  Target: >= 0.8.
2. Limiter CPU: CPU seconds per permit of ``receiver.RateLimiter`` against ``aiolimiter`` at the
   same rate, one permit per acquire and 100 per acquire.  Target: <= 0.5.

Usage: ``.venv/bin/python bench/receiver.py [--records 1000000] [--rounds 3] [--profile FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiolimiter import AsyncLimiter
from harness import produce, profiled, ratio_of_medians, report

from sluice.processes import start_broker, start_tracker
from sluice.receiver.cli import tune_interpreter
from sluice.receiver.rate_limiter import RateLimiter
from sluice.receiver.sources.kafka import KafkaReceiver
from sluice.receiver.supervisor import ReceiverSupervisor
from sluice.storage.block_store import open_block_store
from sluice.tracker.client import TrackerClient

DEFAULT_GC_THRESHOLD = gc.get_threshold()  # the raw loop runs with these
PARTITIONS = 4


async def raw_getmany(bootstrap: str, topic: str, records: int) -> float:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    seen, first = 0, None
    try:
        while seen < records:
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                if first is None:
                    first = time.perf_counter()
                seen += len(messages)
        return seen / (time.perf_counter() - first)
    finally:
        await consumer.stop()


class CountingSupervisor(ReceiverSupervisor):
    """Notes the first stored record and the acknowledgement of the last."""

    def __init__(self, *args, expected: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.expected = expected
        self.acked = 0
        self.first: float | None = None
        self.all_stored: float | None = None
        self.done = asyncio.Event()

    async def push_many(self, items, metadata) -> None:
        if self.first is None:
            self.first = time.perf_counter()
        await super().push_many(items, metadata)
        if self.records_stored >= self.expected and self.all_stored is None:
            self.all_stored = time.perf_counter()

    async def on_push_block(self, block_id: str, records: list) -> None:
        await super().on_push_block(block_id, records)
        self.acked += len(records)
        if self.acked >= self.expected:
            self.done.set()


async def sluice_receiver(bootstrap: str, topic: str, records: int, tracker: str, store_dir: Path,
                          round_no: int) -> float:
    tune_interpreter()  # as sluice-receiver does in its process
    async with TrackerClient(tracker, "receiver") as client:
        receiver = KafkaReceiver(bootstrap, topic, f"bench-{topic}-{round_no}")
        sup = CountingSupervisor(receiver, client, open_block_store(store_dir.as_uri()), stream_id=round_no,
                                 receiver_id=f"bench-{round_no}", expected=records)
        await sup.start()
        await sup.done.wait()
        finished = time.perf_counter()
        await sup.stop("benchmark over")
    sys.setswitchinterval(0.005)  # the raw loop runs with the interpreter's defaults
    gc.set_threshold(*DEFAULT_GC_THRESHOLD)
    gc.unfreeze()
    assert sup.first is not None and sup.all_stored is not None
    print(f"  receiver: all records stored after {sup.all_stored - sup.first:.2f}s, last block acknowledged "
          f"{(finished - sup.all_stored) * 1000:.0f} ms later; mean push (store + fsync + ack) "
          f"{_mean_push_ms(sup):.1f} ms over {sup.generator.blocks_pushed} blocks")
    return records / (finished - sup.first)


def _mean_push_ms(sup: ReceiverSupervisor) -> float:
    samples = {s.name: s.value for metric in [sup.metrics.push_seconds.collect()[0]] for s in metric.samples
               if not s.labels.get("le")}
    count = samples.get("sluice_receiver_push_seconds_count", 0)
    return 1000 * samples.get("sluice_receiver_push_seconds_sum", 0) / count if count else 0.0


async def limiter_cpu(rate: float, seconds: float, batch: int) -> tuple[float, float]:
    """CPU seconds per permit for (Sluice RateLimiter, aiolimiter), same rate, same batch size."""

    async def run(acquire) -> float:
        permits = calls = 0
        cpu0, end = time.process_time(), time.perf_counter() + seconds
        while True:
            await acquire(batch)
            permits += batch
            calls += 1
            if calls % 64 == 0 and time.perf_counter() >= end:
                return (time.process_time() - cpu0) / permits

    ours = RateLimiter(rate=rate)
    theirs = AsyncLimiter(rate, 1.0)
    return await run(ours.acquire), await run(theirs.acquire)


async def main(args: argparse.Namespace) -> int:
    broker = start_broker()
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    tracker = start_tracker(tmp / "wal", args=["--log-level", "WARNING"])
    try:
        topic = "bench"
        t0 = time.perf_counter()
        await produce(broker.bootstrap, topic, PARTITIONS, args.records)
        print(f"produced {args.records} records of ~100 bytes to {PARTITIONS} partitions "
              f"in {time.perf_counter() - t0:.1f}s")
        raw, ours = [], []
        for round_no in range(args.rounds):  # alternating, so the machine's drift hits both alike
            raw.append(await raw_getmany(broker.bootstrap, topic, args.records))
            with profiled(args.profile.with_suffix(f".{round_no}.prof") if args.profile else None):
                ours.append(await sluice_receiver(broker.bootstrap, topic, args.records, tracker.address,
                                                  tmp / "blocks", round_no))
            print(f"round {round_no + 1}: aiokafka getmany {raw[-1]:,.0f} rec/s, "
                  f"sluice receiver (acknowledged) {ours[-1]:,.0f} rec/s")
        throughput_ratio = ratio_of_medians(ours, raw)
        print(f"throughput: receiver {statistics.median(ours):,.0f} rec/s vs raw getmany "
              f"{statistics.median(raw):,.0f} rec/s (medians) -> ratio {throughput_ratio:.2f} "
              f"(target >= 0.8: {'met' if throughput_ratio >= 0.8 else 'MISSED'})")
    finally:
        tracker.stop()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # ~130 MB of blocks per round

    limiter = {}
    for batch in (1, 100):
        ours_cpu, theirs_cpu = await limiter_cpu(args.limiter_rate, args.limiter_seconds, batch)
        limiter[batch] = ratio = ours_cpu / theirs_cpu
        print(f"limiter CPU at {args.limiter_rate:,.0f} permits/s, {batch} per acquire: sluice "
              f"{ours_cpu * 1e9:,.1f} ns/permit vs aiolimiter {theirs_cpu * 1e9:,.1f} ns/permit -> ratio {ratio:.2f} "
              f"(target <= 0.5: {'met' if ratio <= 0.5 else 'MISSED'})")
    report("receiver", records=args.records, rounds=args.rounds, receiver_records_per_s=ours,
           getmany_records_per_s=raw, throughput_ratio=round(throughput_ratio, 3),
           limiter_cpu_ratio_1=round(limiter[1], 3), limiter_cpu_ratio_100=round(limiter[100], 3))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limiter-rate", type=float, default=50_000)
    parser.add_argument("--limiter-seconds", type=float, default=2.0)
    parser.add_argument("--profile", type=Path, default=None,
                        help="write a cProfile of each receiver round to FILE.<round>.prof")
    sys.exit(asyncio.run(main(parser.parse_args())))
