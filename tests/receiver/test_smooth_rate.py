"""Smooth at any rate: no source takes more than one block interval's worth of permits at once.

A socket read holds thousands of lines; acquiring them all at 100 records/s costs tens of seconds
of permits, during which every block and every batch is empty.  Stored in limiter-sized pieces,
every batch holds records while the rate is above 0 and data is waiting.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from sluice.clock import ManualClock
from sluice.receiver.rate_limiter import limiter_pieces
from sluice.receiver.sources.socket import SocketReceiver
from sluice.receiver.supervisor import ReceiverSupervisor
from sluice.storage.block_store import open_block_store
from sluice.tracker.wire.results import AddBlockResult

from .helpers import record_acquires

BLOCK_MS = 200
BATCH_MS = 1000
RATE = 100.0


class RecordingTracker:
    """The tracker calls a supervisor makes, answered at once; the blocks it was given, kept."""

    def __init__(self) -> None:
        self.blocks: list = []

    async def register_receiver(self, stream_id, receiver_id, host, block_store=None):
        return None

    def incarnation(self, receiver_id):
        return 1

    async def deregister_receiver(self, receiver_id, reason=""):
        return None

    async def heartbeat(self, receiver_id, lag=None, head_ts_ms=None, open_transaction_records=None):
        return None

    async def add_block(self, info):
        self.blocks.append(info)
        return AddBlockResult(True, info)

    async def report_error(self, stream_id, receiver_id, message, error=""):
        return None


async def test_saturated_socket_at_100_per_second_feeds_every_batch(tmp_path: Path):
    """A real socket source a server keeps full, the real supervisor, limiter and block generator
    on a manual clock: at 100 records/s every 1 s batch (blocks grouped by their interval) holds
    about 100 records; none is empty."""
    line = b"x" * 30 + b"\n"  # a 64 KiB read holds ~2,100 lines: 21 s of permits at 100/s

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        chunk = line * 4096
        try:
            while True:
                writer.write(chunk)
                await writer.drain()  # blocks while the receiver does not read: saturated, not flooded
        except (ConnectionError, asyncio.CancelledError):
            pass

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    clock = ManualClock(0)
    tracker = RecordingTracker()
    sup = ReceiverSupervisor(
        SocketReceiver("127.0.0.1", port),
        tracker,
        open_block_store((tmp_path / "blocks").as_uri()),
        stream_id=0,
        receiver_id="s",
        initial_rate=RATE,
        block_interval_ms=BLOCK_MS,
        heartbeat_interval_ms=60_000,
        clock=clock,
    )
    acquired = record_acquires(sup.limiter)
    await sup.start()
    try:
        # timer + heartbeat + the receiver parked on the limiter: everything waits on the clock
        for _ in range(7 * BATCH_MS // 20):
            await clock.wait_for_sleepers(3)
            clock.advance(20)
        await clock.wait_for_sleepers(3)
    finally:
        stopping = asyncio.create_task(sup.stop())
        while not stopping.done():  # the last tick after stop is on the manual clock too
            clock.advance(BLOCK_MS)
            await asyncio.sleep(0.01)
        server.close()
    per_batch: dict[int, int] = defaultdict(int)
    for info in tracker.blocks:
        start = int(info.block_id.rsplit("-", 1)[-1])
        per_batch[start // BATCH_MS] += info.num_records
    batches = [per_batch[b] for b in range(1, 6)]  # whole seconds, after the first
    assert all(b > 0 for b in batches), batches
    assert all(0.8 * RATE <= b <= 1.2 * RATE for b in batches), batches
    assert max(acquired) <= RATE * BLOCK_MS / 1000, max(acquired)  # never more permits at once


def test_kafka_fetch_cut_into_pieces_each_with_its_offsets():
    """Each piece names exactly the offsets it holds (gaps in offsets, e.g. transaction markers,
    stay between pieces), together they hold the fetch in order, and the size is asked per piece."""
    offsets = [0, 1, 2, 5, 6, 7, 8, 9, 12, 13, 14]
    messages = [SimpleNamespace(offset=o) for o in offsets]
    sizes = iter([4, 4, 2, 100])
    pieces = list(limiter_pieces(messages, lambda: next(sizes)))
    assert [[m.offset for m in piece] for piece, _ in pieces] == [[0, 1, 2, 5], [6, 7, 8, 9], [12, 13], [14]]
    assert [span for _, span in pieces] == [(0, 6), (6, 10), (12, 14), (14, 15)]
    assert list(limiter_pieces(messages, lambda: 0))[0][1] == (0, 1)  # never an empty piece
    assert list(limiter_pieces([], lambda: 10)) == []


@pytest.mark.parametrize("rate, expected, doubled", [(100.0, 20, 40), (1.0, 1, 1), (15_000.0, 3_000, 6_000)])
def test_piece_size_is_one_block_interval_at_the_current_rate(tmp_path: Path, rate, expected, doubled):
    sup = ReceiverSupervisor(
        SocketReceiver("127.0.0.1", 1),
        RecordingTracker(),
        open_block_store((tmp_path / "blocks").as_uri()),
        stream_id=0,
        receiver_id="s",
        initial_rate=rate,
        block_interval_ms=BLOCK_MS,
        clock=ManualClock(0),
    )
    assert sup.pusher.piece_size() == expected
    sup.update_rate(rate * 2)
    assert sup.pusher.piece_size() == doubled  # follows the rate
