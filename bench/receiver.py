"""Benchmark: a Sluice receiver against its peers, measured in the same alternating rounds.

1. Throughput: one receiver (KafkaReceiver -> limiter -> blocks -> file store with fsync -> real
   ``sluice-tracker`` with its fsynced WAL -> acknowledged), records/s from its first record to the
   acknowledgement of the last, against a plain aiokafka ``getmany`` loop reading the same topic on
   the same Apache Kafka broker.  Both sides run under the same interpreter settings, twice: the
   interpreter's defaults for both, then the receiver worker's tuning (``tune_interpreter``:
   switch interval, GC thresholds, frozen start-up objects) for both.  Target: >= 0.9.  The line
   also gives the receiver's rate to its last record *stored* (``stored``, ``stored_ratio``): the
   last block waits up to one block interval for its cut and then for its push, a fixed tail that
   a steady stream does not pay per record.  ``seconds_in`` says where each side's time went:
   awaiting ``getmany`` (the loop), awaiting its own fetch requests (the receiver; this includes
   the pushes and acks the loop runs meanwhile), cutting fetched record batches into pieces and
   storing them, of which awaiting ``store_encoded`` (the receiver), and the CPU seconds
   the same window cost this process (all its threads; and its event loop's thread alone), the
   broker and the tracker (``cpu_*``): whether a side waited for the other processes or for its
   own interpreter.
   ``--block-writes no-fsync|none`` (diagnosis, not the product) shows what the block writes cost.
2. Limiter CPU: CPU seconds per permit of ``receiver.RateLimiter`` against ``aiolimiter`` at the
   same rate, one permit per acquire and 100 per acquire.  Target: <= 0.5.
3. Memory per 100,000 buffered records: what a receiver's buffer holds for 100,000 fetched
   records (the record batches of its own fetch requests, cut into pieces), Python's own
   allocations (``tracemalloc``) and the resident set's growth in a fresh process, against the
   same records held as ``getmany`` returned them.

Usage: ``.venv/bin/python bench/receiver.py [--quick] [--rounds 5] [--records 1000000] [--profile FILE]
[--block-writes durable|no-fsync|none]``
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiolimiter import AsyncLimiter
from harness import alternate_async, cpu_seconds, figure, options, parser, produce, profiled, say, series
from receiver_memory import PARTITIONS, buffered_memory
from receiver_timing import CountingPusher, Spent, TimedKafkaReceiver, mean_push_ms, split_series

from sluice.durable import atomic_write
from sluice.embedded import KafkaBroker, start_kafka, start_tracker
from sluice.kafka.fetcher import RecordBatchFetcher
from sluice.receiver.cli import tune_interpreter
from sluice.receiver.rate_limiter import RateLimiter
from sluice.receiver.supervisor import ReceiverSupervisor
from sluice.storage import block_store
from sluice.storage.block_store import open_block_store
from sluice.tracker.client.tracker_client import TrackerClient

DEFAULT_GC_THRESHOLD = gc.get_threshold()
DEFAULT_SWITCH_INTERVAL = sys.getswitchinterval()


@contextmanager
def interpreter(tuned: bool) -> Iterator[None]:
    """Run the block under the receiver worker's tuning (or the defaults), then restore the defaults."""
    if tuned:
        tune_interpreter()
    try:
        yield
    finally:
        sys.setswitchinterval(DEFAULT_SWITCH_INTERVAL)
        gc.set_threshold(*DEFAULT_GC_THRESHOLD)
        gc.unfreeze()


async def raw_getmany(bootstrap: str, topic: str, records: int, spent: Spent) -> float:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    getmany = spent.timed("getmany", consumer.getmany)
    seen = 0
    first: float | None = None
    try:
        while seen < records:
            for messages in (await getmany(timeout_ms=200)).values():
                if first is None:
                    first = time.perf_counter()
                    spent.cpu_from()
                seen += len(messages)
        spent.cpu_to()
        assert first is not None, "no record was fetched"
        return seen / (time.perf_counter() - first)
    finally:
        await consumer.stop()


# --block-writes: what the file store does with a block's bytes.  Only "durable" is the product;
# the others are diagnoses of what writing costs beside the fetches.
BLOCK_WRITES = {
    "durable": atomic_write,
    "no-fsync": functools.partial(atomic_write, fsync=False),
    "none": lambda path, parts, **kwargs: None,
}


async def sluice_receiver(
    bootstrap: str,
    topic: str,
    records: int,
    tracker: str,
    store_dir: Path,
    round_no: int,
    spent: Spent,
    block_writes: str = "durable",
) -> tuple[float, float]:
    """(records/s to the acknowledgement of the last block, records/s to the last record stored)."""
    async with TrackerClient(tracker, "receiver") as client:
        receiver = TimedKafkaReceiver(bootstrap, topic, f"bench-{topic}-{round_no}", spent=spent)
        sup = ReceiverSupervisor(
            receiver,
            client,
            open_block_store(store_dir.as_uri()),
            stream_id=round_no,
            receiver_id=f"bench-{round_no}",
            pusher_factory=functools.partial(CountingPusher, expected=records, spent=spent),
        )
        pusher = sup.pusher
        assert isinstance(pusher, CountingPusher)
        timed_fetch = spent.timed("fetch", RecordBatchFetcher.fetch_next)
        with (
            mock.patch.object(RecordBatchFetcher, "fetch_next", timed_fetch),
            mock.patch.object(block_store, "atomic_write", BLOCK_WRITES[block_writes]),
        ):
            await sup.start()
            await pusher.done.wait()
        finished = time.perf_counter()
        await sup.stop("benchmark over")
    assert pusher.first is not None and pusher.all_stored is not None
    say(
        f"  receiver: all records stored after {pusher.all_stored - pusher.first:.2f}s, last block acknowledged "
        f"{(finished - pusher.all_stored) * 1000:.0f} ms later; mean push (store + fsync + ack) "
        f"{mean_push_ms(sup):.1f} ms over {pusher.generator.blocks_pushed} blocks"
    )
    return records / (finished - pusher.first), records / (pusher.all_stored - pusher.first)


async def limiter_cpu(acquire, seconds: float, batch: int) -> float:
    """CPU seconds per permit of ``acquire(batch)`` called for ``seconds`` (at the limiter's rate)."""
    permits = calls = 0
    cpu0, end = time.process_time(), time.perf_counter() + seconds
    while True:
        await acquire(batch)
        permits += batch
        calls += 1
        if calls % 64 == 0 and time.perf_counter() >= end:
            return (time.process_time() - cpu0) / permits


def main(args: argparse.Namespace) -> int:
    """The broker starts before the event loop: ``start_kafka`` is synchronous and waits for the
    broker to serve with an event loop of its own, which cannot run inside a running one."""
    broker = start_kafka()
    try:
        asyncio.run(through_the_broker(args, broker))
    finally:
        broker.stop()
    asyncio.run(limiters(args))
    return 0


async def through_the_broker(args: argparse.Namespace, broker: KafkaBroker) -> None:
    """Throughput and memory: the topic, the tracker and both sides' rounds."""
    records = args.records or (20_000 if args.quick else 1_000_000)
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    tracker = start_tracker(tmp / "wal", args=["--log-level", "WARNING"], block_store=(tmp / "blocks").as_uri())
    runs = 0

    def cpu_clock() -> dict[str, float]:
        """Called on the event loop's thread, so ``loop_thread`` is that thread's share of ``process``."""
        return {
            "process": time.process_time(),
            "loop_thread": time.thread_time(),
            "broker": cpu_seconds(broker.proc.pid),
            "tracker": cpu_seconds(tracker.proc.pid),
        }

    try:
        topic = "bench"
        t0 = time.perf_counter()
        await produce(broker.bootstrap, topic, PARTITIONS, records)
        say(f"produced {records} records of ~100 bytes to {PARTITIONS} partitions in {time.perf_counter() - t0:.1f}s")
        for tuned in (False, True) if args.only in (None, "throughput") else ():
            label = "tuned" if tuned else "default"
            stored: list[float] = []  # the receiver's rounds, to the last record stored
            splits: dict[str, list[Spent]] = {"receiver": [], "getmany": []}

            async def raw(
                round_no: int, tuned: bool = tuned, label: str = label, splits: dict[str, list[Spent]] = splits
            ) -> float:
                splits["getmany"].append(Spent(cpu_clock))
                with interpreter(tuned):
                    rate = await raw_getmany(broker.bootstrap, topic, records, splits["getmany"][-1])
                say(f"  round {round_no + 1} ({label}): aiokafka getmany {rate:,.0f} rec/s")
                return rate

            async def ours(
                round_no: int,
                tuned: bool = tuned,
                label: str = label,
                stored: list[float] = stored,
                splits: dict[str, list[Spent]] = splits,
            ) -> float:
                nonlocal runs
                runs += 1
                profile = args.profile.with_suffix(f".{label}.{round_no}.prof") if args.profile else None
                splits["receiver"].append(Spent(cpu_clock))
                with interpreter(tuned), profiled(profile):
                    rate, stored_rate = await sluice_receiver(
                        broker.bootstrap,
                        topic,
                        records,
                        tracker.address,
                        tmp / "blocks",
                        runs,
                        splits["receiver"][-1],
                        args.block_writes,
                    )
                stored.append(stored_rate)
                say(
                    f"  round {round_no + 1} ({label}): sluice receiver (acknowledged) {rate:,.0f} rec/s "
                    f"(stored {stored_rate:,.0f})"
                )
                shutil.rmtree(tmp / "blocks", ignore_errors=True)  # ~130 MB of blocks per million records
                return rate

            sides: dict[str, Callable[[int], Awaitable[float]]] = {"receiver": ours, "getmany": raw}
            values = await alternate_async(args.rounds, sides)
            line = figure(
                "receiver",
                f"throughput, {label} interpreter settings",
                "records/s",
                values["receiver"],
                peer=values["getmany"],
                peer_name=f"aiokafka getmany loop ({label} settings)",
                target=">= 0.9",
                digits=0,
                records=records,
                stored=series(stored, 0),
                stored_ratio=round(statistics.median(stored) / statistics.median(values["getmany"]), 3),
                seconds_in=split_series(splits),
                block_writes=args.block_writes,
            )
            say(
                f"throughput ({label} settings, medians of {args.rounds}): receiver {line['median']:,.0f} rec/s vs "
                f"getmany {line['peer']['median']:,.0f} -> ratio {line['ratio']:.2f} "
                f"(target >= 0.9: {'met' if line['met'] else 'MISSED'})"
            )
            parts = line["seconds_in"]
            say(
                f"  seconds in (medians): the loop awaiting getmany {parts['getmany']['getmany']['median']:.3f}; the "
                f"receiver awaiting its fetches {parts['receiver']['fetch']['median']:.3f}, storing "
                f"{parts['receiver']['store']['median']:.3f}, of which awaiting store_encoded "
                f"{parts['receiver']['store_wait']['median']:.3f}"
            )
            say(
                "  CPU seconds over the same window (medians): "
                + "; ".join(
                    f"{side} - this process {cpu['cpu_process']['median']:.3f} (its event loop's thread "
                    f"{cpu['cpu_loop_thread']['median']:.3f}), broker {cpu['cpu_broker']['median']:.3f}, "
                    f"tracker {cpu['cpu_tracker']['median']:.3f}"
                    for side, cpu in (("the loop", parts["getmany"]), ("the receiver", parts["receiver"]))
                )
            )
        if records >= 100_000 and args.only in (None, "memory"):

            async def pieces(round_no: int) -> tuple[float, float]:
                return await buffered_memory(broker.bootstrap, topic, 100_000, encoded=True)

            async def fetched(round_no: int) -> tuple[float, float]:
                return await buffered_memory(broker.bootstrap, topic, 100_000, encoded=False)

            held = await alternate_async(args.rounds, {"pieces": pieces, "records": fetched})
            line = figure(
                "receiver",
                "memory per 100,000 buffered records (record batch pieces, tracemalloc)",
                "MB",
                [h[0] for h in held["pieces"]],
                peer=[h[0] for h in held["records"]],
                peer_name="the fetched ConsumerRecords (what getmany returns)",
                digits=2,
                resident_growth_mb=series([h[1] for h in held["pieces"]], 2),
                peer_resident_growth_mb=series([h[1] for h in held["records"]], 2),
            )
            say(
                f"100,000 buffered records: {line['median']:.1f} MB as pieces of record batches (resident set of a "
                f"fresh process grew {line['resident_growth_mb']['median']:.1f} MB), "
                f"{line['peer']['median']:.1f} MB as fetched records (grew "
                f"{line['peer_resident_growth_mb']['median']:.1f} MB): x{line['ratio']:.2f}"
            )
    finally:
        tracker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def limiters(args: argparse.Namespace) -> None:
    """Limiter CPU, with the broker stopped."""
    seconds = 0.2 if args.quick else args.limiter_seconds
    for batch in (1, 100) if args.only in (None, "limiter") else ():

        async def ours_cpu(r: int, batch: int = batch) -> float:
            return await limiter_cpu(RateLimiter(rate=args.limiter_rate).acquire, seconds, batch)

        async def theirs_cpu(r: int, batch: int = batch) -> float:
            return await limiter_cpu(AsyncLimiter(args.limiter_rate, 1.0).acquire, seconds, batch)

        values = await alternate_async(args.rounds, {"ours": ours_cpu, "aiolimiter": theirs_cpu})
        line = figure(
            "receiver",
            f"limiter CPU, {batch} permit(s) per acquire",
            "ns/permit",
            [v * 1e9 for v in values["ours"]],
            peer=[v * 1e9 for v in values["aiolimiter"]],
            peer_name="aiolimiter",
            target="<= 0.5",
            digits=1,
            rate=args.limiter_rate,
        )
        say(
            f"limiter CPU at {args.limiter_rate:,.0f} permits/s, {batch} per acquire: sluice {line['median']:,.1f} "
            f"ns/permit vs aiolimiter {line['peer']['median']:,.1f} -> ratio {line['ratio']:.2f} "
            f"(target <= 0.5: {'met' if line['met'] else 'MISSED'})"
        )


if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--records", type=int, default=None, help="records in the topic (default 1,000,000; --quick 20,000)")
    p.add_argument("--only", choices=("throughput", "memory", "limiter"), help="run one part only")
    p.add_argument("--limiter-rate", type=float, default=50_000)
    p.add_argument("--limiter-seconds", type=float, default=2.0)
    p.add_argument(
        "--block-writes",
        choices=tuple(BLOCK_WRITES),
        default="durable",
        help="diagnosis only: write blocks without fsync, or not at all (default: durable, the product)",
    )
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="write a cProfile of each receiver round to FILE.<settings>.<round>.prof",
    )
    sys.exit(main(options(p)))
