"""Benchmark: a Sluice receiver against its peers, measured in the same alternating rounds.

1. Throughput: one receiver (KafkaReceiver -> limiter -> blocks -> file store with fsync -> real
   ``sluice-tracker`` with its fsynced WAL -> acknowledged), records/s from its first record to the
   acknowledgement of the last, against a plain aiokafka ``getmany`` loop reading the same topic on
   the same tansu broker.  Both sides run under the same interpreter settings, twice: the
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
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiolimiter import AsyncLimiter
from harness import alternate_async, cpu_seconds, figure, options, parser, produce, profiled, say, series

from sluice.durable import atomic_write
from sluice.receiver.block_pusher import BlockPusher
from sluice.receiver.cli import tune_interpreter
from sluice.receiver.rate_limiter import RateLimiter
from sluice.receiver.sources.kafka import KafkaReceiver
from sluice.receiver.sources.kafka_fetcher import RecordBatchFetcher
from sluice.receiver.supervisor import ReceiverSupervisor
from sluice.storage import block_store
from sluice.storage.block_store import open_block_store
from sluice.storage.kafka_batches import batch_pieces
from sluice.testing import start_broker, start_tracker
from sluice.tracker.client import TrackerClient

DEFAULT_GC_THRESHOLD = gc.get_threshold()
DEFAULT_SWITCH_INTERVAL = sys.getswitchinterval()
PARTITIONS = 4


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


class Spent(dict):
    """Seconds spent per part of a round (``getmany``: awaiting it; ``fetch``: awaiting the receiver's
    fetch rounds; ``store``: cutting fetched batches into pieces and storing them, of which
    ``store_wait``: awaiting ``store_encoded``, where the limiter and a full buffer hold a receiver back;
    ``cpu_<process>``: CPU seconds of each process over the measured window, see :meth:`cpu_from`).

    :param cpu_clock: the CPU seconds used so far by each process that takes part in a round.
    """

    def __init__(self, cpu_clock: Callable[[], dict[str, float]]) -> None:
        super().__init__()
        self.cpu_clock = cpu_clock
        self._cpu_start: dict[str, float] = {}

    def cpu_from(self) -> None:
        """The measured window starts now (its first record)."""
        self._cpu_start = self.cpu_clock()

    def cpu_to(self) -> None:
        """The measured window ends now: each process's CPU seconds since :meth:`cpu_from`."""
        for name, seconds in self.cpu_clock().items():
            self[f"cpu_{name}"] = seconds - self._cpu_start[name]

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.perf_counter() - started

    def timed(self, name: str, call):
        async def timed_call(*args, **kwargs):
            with self.part(name):
                return await call(*args, **kwargs)

        return timed_call


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


class CountingPusher(BlockPusher):
    """Notes the first stored record and the acknowledgement of the last."""

    def __init__(self, *args, expected: int, spent: Spent, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.expected = expected
        self.spent = spent
        self.acked = 0
        self.first: float | None = None
        self.all_stored: float | None = None
        self.done = asyncio.Event()

    async def push_encoded(self, piece, metadata) -> None:
        if self.first is None:  # noted after the first piece was cut: ms after its fetch, <0.5% of a round
            self.first = time.perf_counter()
            self.spent.cpu_from()
        await super().push_encoded(piece, metadata)
        if self.records_stored >= self.expected and self.all_stored is None:
            self.all_stored = time.perf_counter()

    async def on_push_block(self, block_id: str, records: list, num_records: int) -> None:
        await super().on_push_block(block_id, records, num_records)
        self.acked += num_records
        if self.acked >= self.expected and not self.done.is_set():
            self.spent.cpu_to()
            self.done.set()


class TimedKafkaReceiver(KafkaReceiver):
    """The Kafka receiver with its storing of fetched batches and its awaits of ``store_encoded``
    timed into ``spent`` (its fetch rounds are timed by the caller)."""

    def __init__(self, *args, spent: Spent, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.spent = spent

    async def _store_batches(self, tp, data, position, highwater) -> None:
        with self.spent.part("store"):
            await super()._store_batches(tp, data, position, highwater)

    async def store_encoded(self, piece, offsets) -> None:
        with self.spent.part("store_wait"):
            await super().store_encoded(piece, offsets)


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
        timed_fetch = spent.timed("fetch", RecordBatchFetcher.fetch)
        with (
            mock.patch.object(RecordBatchFetcher, "fetch", timed_fetch),
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
        f"{_mean_push_ms(sup):.1f} ms over {pusher.generator.blocks_pushed} blocks"
    )
    return records / (finished - pusher.first), records / (pusher.all_stored - pusher.first)


def split_series(splits: dict[str, list[Spent]]) -> dict[str, dict[str, dict]]:
    """Per side and part, the series of seconds over the rounds."""
    return {
        side: {
            part: series([round_spent.get(part, 0.0) for round_spent in rounds], 3)
            for part in sorted({part for round_spent in rounds for part in round_spent})
        }
        for side, rounds in splits.items()
    }


def _mean_push_ms(sup: ReceiverSupervisor) -> float:
    samples = {
        s.name: s.value
        for metric in sup.metrics.push_seconds.collect()
        for s in metric.samples
        if not s.labels.get("le")
    }
    count = samples.get("sluice_receiver_push_seconds_count", 0)
    return 1000 * samples.get("sluice_receiver_push_seconds_sum", 0) / count if count else 0.0


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


async def fetch(bootstrap: str, topic: str, records: int, encoded: bool) -> list:
    """The topic's first ``records`` records (or a few more), the consumer closed: as ``getmany``
    returned them, or as the receiver's buffer holds them (``encoded``: the record batches of its
    fetch requests, cut into pieces)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    held: list = []
    count = 0
    try:
        if encoded:
            consumer.pause(*partitions)
            fetcher = RecordBatchFetcher(consumer, {})
            positions = {tp: await consumer.position(tp) for tp in partitions}
        while count < records:
            if encoded:
                for tp, data in (await fetcher.fetch(positions)).data.items():
                    pieces = list(batch_pieces(tp.topic, tp.partition, data, positions[tp], lambda: sys.maxsize))
                    if pieces:
                        held += pieces
                        count += sum(piece.num_records for piece in pieces)
                        positions[tp] = pieces[-1].until_offset
            else:
                for messages in (await consumer.getmany(timeout_ms=200, max_records=records - count)).values():
                    held += messages
                    count += len(messages)
    finally:
        await consumer.stop()
    return held


def resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def resident_growth(bootstrap: str, topic: str, records: int, encoded: bool, out) -> None:
    """In a fresh process (its heap not grown by earlier rounds): how much its resident set grows
    from fetching ``records`` records and holding them, put on ``out`` in bytes."""
    gc.collect()
    before = resident_bytes()
    held = asyncio.run(fetch(bootstrap, topic, records, encoded))
    gc.collect()
    out.put(resident_bytes() - before)
    del held


async def buffered_memory(bootstrap: str, topic: str, records: int, encoded: bool) -> tuple[float, float]:
    """(traced MB, resident MB growth in a fresh process) of holding ``records`` fetched records,
    as the receiver's pieces of record batches or as the records ``getmany`` returned."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=resident_growth, args=(bootstrap, topic, records, encoded, out))
    child.start()
    rss = await asyncio.get_running_loop().run_in_executor(None, out.get, True, 120)
    child.join()
    gc.collect()
    tracemalloc.start()
    traced0 = tracemalloc.get_traced_memory()[0]
    held = await fetch(bootstrap, topic, records, encoded)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - traced0
    tracemalloc.stop()
    del held
    return traced / 1e6, rss / 1e6


async def main(args: argparse.Namespace) -> int:
    records = args.records or (20_000 if args.quick else 1_000_000)
    broker = start_broker()
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
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)

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
    return 0


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
    sys.exit(asyncio.run(main(options(p))))
