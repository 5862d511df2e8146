"""A block reports where its records' time went: its first and last pieces' broker, fetch and
admission times, its cut and its store write (sluice.stages), in the order they happened."""

from __future__ import annotations

from pathlib import Path

from sluice.block_info import ReceivedBlockInfo
from sluice.records import Record
from sluice.stages import STAMPS, now_ms
from sluice.storage.block_kafka import encode_kafka_piece
from sluice.storage.block_store import FileBlockStore
from sluice.tracker.wire.results import AddBlockResult
from tests.receiver.test_block_ids import pusher


class Sink:
    """A tracker that takes every block and keeps what it was told."""

    def __init__(self) -> None:
        self.blocks: list[ReceivedBlockInfo] = []

    def incarnation(self, receiver_id: str) -> int:
        return 1

    async def add_block(self, info: ReceivedBlockInfo) -> AddBlockResult:
        self.blocks.append(info)
        return AddBlockResult(True, info)


def piece(first_offset: int, timestamps: list[int]):
    records = [Record(None, b"v", "t", 0, first_offset + i, ts) for i, ts in enumerate(timestamps)]
    return encode_kafka_piece(records, ("t", 0))


async def test_a_block_carries_its_first_and_last_pieces_stamps_in_order(tmp_path: Path) -> None:
    sink = Sink()
    p = pusher(sink, FileBlockStore(tmp_path))  # type: ignore[arg-type]
    p.generator.start()
    before = now_ms()
    await p.push_encoded(piece(0, [1_000, 1_005]), {("t", 0): (0, 2)})
    await p.push_encoded(piece(2, [1_100, 1_200, 1_300]), {("t", 0): (2, 5)})
    await p.flush()  # cuts the buffer into a block and pushes it
    after = now_ms()
    p.generator.abort()  # its timer waits on a manual clock

    (info,) = sink.blocks
    stamps = info.metadata[STAMPS]
    assert stamps["append"] == [1_000, 1_300]  # the first piece's oldest record, the last piece's newest
    first, last = (stamps[k][0] for k in ("fetch", "admit")), (stamps[k][1] for k in ("fetch", "admit"))
    assert before <= min(first) and max(last) <= stamps["cut"] <= stamps["stored"] <= after
    assert stamps["fetch"][0] <= stamps["admit"][0] <= stamps["fetch"][1] <= stamps["admit"][1]


async def test_a_piece_is_stamped_fetched_when_its_fetch_response_arrived(tmp_path: Path) -> None:
    """A fetch response's later pieces wait for the limiter to admit the earlier ones: that wait is
    the limiter's (fetch -> admit), not the broker's (append -> fetch)."""
    sink = Sink()
    p = pusher(sink, FileBlockStore(tmp_path))  # type: ignore[arg-type]
    p.generator.start()
    arrived = now_ms() - 500
    await p.push_encoded(piece(0, [1_000]), {("t", 0): (0, 1)}, fetched_ms=arrived)
    await p.flush()
    p.generator.abort()
    stamps = sink.blocks[0].metadata[STAMPS]
    assert stamps["fetch"] == [arrived, arrived] and stamps["admit"][0] >= arrived + 500
