"""Tracker benchmark: durable add_block acks/s (1, 4, 16 clients) and allocation of 10,000 blocks.

Runs a real ``sluice-tracker`` process (fsync on, group commit) and drives it with
:class:`tracker.TrackerClient` connections, each keeping ``--window`` requests in flight.  Every
figure is a series over ``--rounds`` rounds, alternating with its peer:

* acks/s: the peer is what durability costs without group commit, a loop that writes each record
  of the same size and fsyncs it before the next (one fsync per ack), on the same disk.  The
  tracker's CPU seconds per ack come with each round (``/proc``), so a 2-core limit shows.
* allocating 10,000 blocks over RPC (request, the tracker's durable log, the columnar reply
  checked and decoded into columns on the client): the peer is the same 10,000 blocks fetched back
  over the same connection in the old form, a wire map per block decoded into block objects
  (``get_blocks_of_batch``, which still answers in maps; it writes no log, which favours the peer).
* the same, on to the block RDD's refs (what the driver builds next, from the columns; the peer
  from its objects), so a cost that moved from the decode to the driver's next step shows.

    .venv/bin/python bench/tracker.py [--quick] [--rounds 5] [--blocks 32000] [--window 64]
                                      [--only acks|allocation]

``--only allocation`` skips the ack phases, so the tracker holds 10,000 blocks per round instead of
the load phases' hundreds of thousands as well (a smaller heap: its figure is not the full run's).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from harness import alternate, cpu_seconds, figure, options, parser, say, series

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.embedded import start_tracker
from sluice.spark_driver.block_rdd import block_refs
from sluice.tracker.client.tracker_client import TrackerClient
from sluice.tracker.log.events import BlockAdded, Event
from sluice.tracker.log.wal import WriteAheadLog, encode_record
from sluice.tracker.server.received_block_tracker import ReceivedBlockTracker

BLOCKS = "file:///var/sluice/blocks"  # the store the blocks name (never written: the tracker checks names only)


def block(stream: int, client: int, i: int, incarnation: int | None = 0) -> ReceivedBlockInfo:
    """Block ``i`` of receiver ``r<client>``, in the id space of its registration's ``incarnation``."""
    block_id = f"input-{stream}-r{client}-{incarnation}-{i}"
    return ReceivedBlockInfo(
        stream,
        block_id,
        f"r{client}",
        500,
        f"{BLOCKS}/stream-{stream}/{block_id}.blk",
        (OffsetRange(f"topic-{client}", 0, i * 500, (i + 1) * 500),),
    )


async def add_load(address: str, clients: int, per_client: int, window: int, offset: int) -> float:
    """Acked add_block per second with ``clients`` connections, ``window`` in flight each."""
    conns = [TrackerClient(address, "receiver", request_timeout=60) for _ in range(clients)]
    await asyncio.gather(*(c.start() for c in conns))
    # the tracker takes blocks of registered streams only
    await asyncio.gather(*(c.register_receiver(0, f"r{offset + ci}", "bench") for ci, c in enumerate(conns)))

    prepared = [
        [block(0, offset + ci, i, c.incarnation(f"r{offset + ci}")) for i in range(per_client)]
        for ci, c in enumerate(conns)
    ]

    async def worker(ci: int, c: TrackerClient) -> None:
        infos = prepared[ci]

        async def lane(lane_infos: list[ReceivedBlockInfo]) -> None:
            for info in lane_infos:
                result = await c.add_block(info)
                assert result.accepted

        await asyncio.gather(*(lane(infos[k::window]) for k in range(window)))

    started = time.perf_counter()
    await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    elapsed = time.perf_counter() - started
    await asyncio.gather(*(c.close() for c in conns))
    return clients * per_client / elapsed


async def allocation_rpc(address: str, n: int, stream: int, batch_time_ms: int) -> tuple[float, ...]:
    """Seconds for allocate_blocks over RPC (request, durable log, columnar reply checked and
    decoded into columns), for fetching the same blocks back in the old map form decoded into
    block objects (the peer), and for each side's block RDD refs (what the driver builds next)."""
    c = TrackerClient(address, "admin", request_timeout=60)
    await c.start()
    await c.register_receiver(stream, "r-alloc", "bench")
    await c.allocate_blocks(batch_time_ms - 1)  # empty the queues of the load phases
    infos = [block(stream, batch_time_ms, i) for i in range(n)]

    async def lane(lane_infos: list[ReceivedBlockInfo]) -> None:
        for info in lane_infos:
            await c.add_block(info)

    await asyncio.gather(*(lane(infos[k::256]) for k in range(256)))
    started = time.perf_counter()
    allocation = await c.allocate_blocks(batch_time_ms)
    ours = time.perf_counter() - started
    assert allocation is not None
    started = time.perf_counter()
    block_refs(allocation[stream])
    ours_refs = time.perf_counter() - started
    started = time.perf_counter()
    again = await c.get_blocks_of_batch(batch_time_ms)
    peer = time.perf_counter() - started
    started = time.perf_counter()
    refs_from_objects(again[stream])
    peer_refs = time.perf_counter() - started
    await c.close()
    if allocation != again or sum(map(len, again.values())) != n:
        raise RuntimeError(f"allocated {sum(map(len, (allocation or {}).values()))} blocks, expected {n}")
    return ours, peer, ours + ours_refs, peer + peer_refs


def refs_from_objects(blocks: list[ReceivedBlockInfo]) -> list[tuple]:
    """The block RDD's refs as the driver built them from block objects before it kept the columns."""
    return [(None, b.location, [r.to_wire() for r in b.offset_ranges], b.block_id) for b in blocks]


def allocation_core(directory: str, n: int) -> float:
    """Seconds for ReceivedBlockTracker.allocate_blocks with its durable WAL write (no RPC)."""
    wal = WriteAheadLog(directory)
    wal.recover()
    tracker = ReceivedBlockTracker(wal)
    tracker.log = _Buffered(wal)
    for i in range(n):
        tracker.add_block(block(0, 20_000, i))
    tracker.log.flush()
    started = time.perf_counter()
    tracker.allocate_blocks(1)
    tracker.log.flush()
    elapsed = time.perf_counter() - started
    wal.close()
    return elapsed


class _Buffered:
    """Group-commit-like log for the in-process measurement: buffer, then one write + fsync."""

    def __init__(self, wal: WriteAheadLog) -> None:
        self.wal = wal
        self.buf: list[bytes] = []

    def write(self, event: Event) -> None:
        self.buf.append(encode_record(event.to_wire()))

    def flush(self) -> None:
        self.wal.write_bytes(b"".join(self.buf))
        self.buf.clear()


def fsync_per_write(directory: str, n: int) -> float:
    """The peer: records of the same size, each written and fsynced before the next."""
    record = encode_record(BlockAdded(block(0, 0, 1)).to_wire())
    fd = os.open(os.path.join(directory, "peer.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    started = time.perf_counter()
    for _ in range(n):
        os.write(fd, record)
        os.fdatasync(fd)
    elapsed = time.perf_counter() - started
    os.close(fd)
    return n / elapsed


def main() -> int:
    p = parser(__doc__)
    p.add_argument(
        "--blocks",
        type=int,
        default=None,
        help="blocks per load run (split among clients; default 32,000, --quick 2,000)",
    )
    p.add_argument("--window", type=int, default=64, help="requests in flight per client")
    p.add_argument("--alloc-blocks", type=int, default=None, help="default 10,000; --quick 1,000")
    p.add_argument("--only", choices=("acks", "allocation"), help="run only the ack or the allocation figures")
    args = options(p)
    blocks = args.blocks or (2_000 if args.quick else 32_000)
    alloc_blocks = args.alloc_blocks or (1_000 if args.quick else 10_000)
    with tempfile.TemporaryDirectory(prefix="sluice-bench-", dir=os.getcwd()) as tmp:
        tracker = start_tracker(Path(tmp) / "wal", args=["--log-level", "WARNING"], block_store=BLOCKS)
        pid, address = tracker.proc.pid, tracker.address
        runs = 0
        try:
            for clients in (1, 4, 16) if args.only != "allocation" else ():
                per_client = blocks // clients
                cpu_per_ack: list[float] = []

                def ours(
                    r: int, clients: int = clients, per_client: int = per_client, cpu_per_ack: list[float] = cpu_per_ack
                ) -> float:
                    nonlocal runs
                    runs += 1
                    before = cpu_seconds(pid)
                    rate = asyncio.run(add_load(address, clients, per_client, args.window, offset=runs * 100))
                    cpu_per_ack.append((cpu_seconds(pid) - before) / (clients * per_client) * 1e6)
                    return rate

                values = alternate(
                    args.rounds, {"tracker": ours, "peer": lambda r: fsync_per_write(tmp, 200 if args.quick else 2000)}
                )
                line = figure(
                    "tracker",
                    f"durable add_block acks/s, {clients} client(s)",
                    "acks/s",
                    values["tracker"],
                    peer=values["peer"],
                    peer_name="one fsync per record, same disk",
                    digits=0,
                    target=">= 20000" if clients == 16 else None,
                    target_of="median",
                    window=args.window,
                    tracker_cpu_us_per_ack=series(cpu_per_ack, 2),
                )
                say(
                    f"durable acks/s, {clients:>2} client(s): median {line['median']:,.0f} ({line['min']:,.0f}-"
                    f"{line['max']:,.0f}), x{line['ratio']:.1f} one fsync per record; tracker CPU "
                    f"{line['tracker_cpu_us_per_ack']['median']:.1f} us/ack"
                    + (f" (target >= 20,000: {'met' if line['met'] else 'MISSED'})" if clients == 16 else "")
                )
            rpc: list[float] = []
            peer: list[float] = []
            to_refs: list[float] = []
            peer_to_refs: list[float] = []
            for r in range(args.rounds if args.only != "acks" else 0):
                times = asyncio.run(allocation_rpc(address, alloc_blocks, stream=1, batch_time_ms=10_000 * (r + 1)))
                for series_ms, seconds in zip((rpc, peer, to_refs, peer_to_refs), times):
                    series_ms.append(seconds * 1000)
        finally:
            code = tracker.stop()
        if args.only == "acks":
            say(f"tracker exit code after SIGTERM: {code}")
            return 0
        core = [allocation_core(f"{tmp}/core-wal-{r}", alloc_blocks) * 1000 for r in range(args.rounds)]
    line = figure(
        "tracker",
        f"allocate {alloc_blocks} blocks over RPC, decoded",
        "ms",
        rpc,
        peer=peer,
        peer_name="the same blocks fetched back as maps (old form, old decoder)",
        target="<= 20",
        target_of="median",
        digits=2,
        blocks=alloc_blocks,
    )
    say(
        f"allocate {alloc_blocks:,} blocks over RPC (columnar reply, decoded): median {line['median']:.1f} ms "
        f"({line['min']:.1f}-{line['max']:.1f}); the old map form of the same blocks {line['peer']['median']:.1f} ms "
        f"(ratio {line['ratio']:.2f}; target <= 20 ms: {'met' if line['met'] else 'MISSED'})"
    )
    line = figure(
        "tracker",
        f"allocate {alloc_blocks} blocks over RPC, to the block RDD's refs",
        "ms",
        to_refs,
        peer=peer_to_refs,
        peer_name="the old map form, block objects, refs from the objects",
        digits=2,
        blocks=alloc_blocks,
    )
    say(
        f"allocate {alloc_blocks:,} blocks over RPC and build the block RDD's refs: median {line['median']:.1f} ms "
        f"({line['min']:.1f}-{line['max']:.1f}); through block objects {line['peer']['median']:.1f} ms "
        f"(ratio {line['ratio']:.2f})"
    )
    line = figure(
        "tracker",
        f"allocate {alloc_blocks} blocks in the tracker core with its durable WAL write",
        "ms",
        core,
        digits=2,
        blocks=alloc_blocks,
    )
    say(f"allocate {alloc_blocks:,} blocks, tracker core + durable WAL write: median {line['median']:.1f} ms")
    say(f"tracker exit code after SIGTERM: {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
