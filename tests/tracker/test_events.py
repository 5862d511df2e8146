"""Tracker WAL events are typed, keep the msgpack maps earlier versions wrote, and an old log recovers."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgpack
import pytest

from sluice.block_info import InvalidMessage, OffsetRange
from sluice.tracker.log.events import (
    BatchAllocated,
    BatchCleanup,
    BatchCompleted,
    BlockAdded,
    RateUpdated,
    ReceiverDeregistered,
    ReceiverRegistered,
    event_from_wire,
)
from sluice.tracker.server.recovery import open_service
from tests.tracker.conftest import make_block

DATA = Path(__file__).parent / "data"
BLOCK = make_block("b1", stream=2, records=5, ranges=(("t", 3, 10, 15),))

# The maps as sluice 0.2.0 (dicts built by hand) wrote them: the on-disk format must not move.
EVENTS = [
    (BlockAdded(BLOCK), {"type": "BlockAdded", "block": BLOCK.to_wire()}),
    (
        BatchAllocated(3000, {2: ["b1", "b2"], 0: []}),
        {"type": "BatchAllocated", "time": 3000, "blocks": {2: ["b1", "b2"], 0: []}},
    ),
    (
        BatchCompleted(3000, {"batch_time_ms": 3000, "num_records": 5}),
        {"type": "BatchCompleted", "time": 3000, "info": {"batch_time_ms": 3000, "num_records": 5}},
    ),
    (BatchCleanup([1000, 2000]), {"type": "BatchCleanup", "times": [1000, 2000]}),
    (RateUpdated(2, 1234.5), {"type": "RateUpdated", "stream_id": 2, "rate": 1234.5}),
    (
        ReceiverRegistered("r0", 2, "h", "token#0", 7),
        {"type": "ReceiverRegistered", "receiver_id": "r0", "stream_id": 2, "host": "h", "principal": "token#0"}
        | {"incarnation": 7},
    ),
    (ReceiverDeregistered("r0"), {"type": "ReceiverDeregistered", "receiver_id": "r0"}),
]


@pytest.mark.parametrize("event, wire", EVENTS, ids=lambda e: type(e).__name__ if not isinstance(e, dict) else "")
def test_each_event_has_the_map_earlier_versions_wrote_and_comes_back(event, wire) -> None:
    assert event.to_wire() == wire
    stored = msgpack.unpackb(msgpack.packb(wire, use_bin_type=True), raw=False, strict_map_key=False)
    assert event_from_wire(stored) == event


@pytest.mark.parametrize(
    "wire, message",
    [
        ({"type": "BlockMoved", "block": {}}, r"not a tracker event, or a 'BlockMoved' event"),
        ({"type": "BatchAllocated", "time": "soon", "blocks": {}}, r"BatchAllocated.time must be an integer, got str"),
        ({"type": "RateUpdated", "stream_id": 0}, r"'RateUpdated' event with missing or mistyped fields"),
        ({"type": "BlockAdded", "block": {"stream_id": 0}}, r"BlockAdded.block.block_id is missing"),
        ([1, 2], r"a tracker event must be a map with a type, got list"),
    ],
)
def test_a_bad_stored_event_is_named(wire, message: str) -> None:
    with pytest.raises(InvalidMessage, match=message):
        event_from_wire(wire)


async def test_a_log_written_by_sluice_0_2_recovers(tmp_path: Path) -> None:
    """``data/wal-0.2.0`` was written by the code before events were typed (dict events): a
    snapshot after b1, b2, s1, batch 1000 allocated and completed, rate 1234.5; then a segment with
    b3 (trimmed by b2 to offsets 20..30), b4, batch 3000 allocated and completed (which cleaned up
    batch 1000), b5 unallocated, and rates 800 and 50: every event type."""
    wal_dir = tmp_path / "wal"
    shutil.copytree(DATA / "wal-0.2.0", wal_dir)
    service, commit = open_service(wal_dir, remember_ms=1000, fsync=False)
    try:
        tracker = service.tracker
        assert [b.block_id for b in tracker.get_unallocated_blocks(0)] == ["b5"]
        assert tracker.batch_times() == [3000] and tracker.pending_batches() == []
        b3, b4 = tracker.get_blocks_of_batch_and_stream(3000, 0)
        assert (b3.block_id, b3.num_records, b3.offset_ranges) == ("b3", 10, (OffsetRange("t", 0, 20, 30),))
        assert b3.metadata == {"k": "v"} and b4.block_id == "b4"
        assert tracker.last_allocated_ms == 3000 and service.registry.rates == {0: 800.0, 1: 50.0}
        # the exactly-once marks came back too: offsets below 45 are duplicates now
        assert tracker.add_block(make_block("again", ranges=(("t", 0, 30, 45),))).accepted is False
    finally:
        commit.wal.close()  # the group commit never started: nothing of its own to flush
