"""The tracker's side of Structured Streaming: per-stream block numbers, ``list_blocks``, ``commit_blocks``.

A real write-ahead log in tmp_path; recovery is a new service replaying it (with and without a
snapshot), so the numbers a query checkpointed mean the same blocks after a tracker restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.block_info import InvalidMessage
from sluice.clock import ManualClock
from sluice.tracker.log.events import BlockAdded, BlocksCommitted, event_from_wire
from sluice.tracker.log.wal import WriteAheadLog
from sluice.tracker.server.received_block_tracker import ReceivedBlockTracker
from sluice.tracker.server.service import TrackerService
from sluice.tracker.wire.protocol import OPS, check_request
from tests.tracker.conftest import make_block


def open_service(wal_dir: Path) -> tuple[TrackerService, WriteAheadLog]:
    wal = WriteAheadLog(wal_dir, fsync=False, segment_ms=60_000, clock=ManualClock())
    recovered = wal.recover()
    service = TrackerService()
    service.recover(recovered.snapshot, recovered.events)
    service.set_log(wal)
    return service, wal


def numbered(tracker: ReceivedBlockTracker, stream: int, from_seq: int = 0, **kw) -> list[tuple[int, str]]:
    return [(seq, b.block_id) for seq, b in tracker.list_blocks(stream, from_seq, **kw)]


def test_each_stream_numbers_its_blocks_in_the_order_they_are_queued() -> None:
    tracker = ReceivedBlockTracker()
    for i in range(3):
        tracker.add_block(make_block(f"a{i}", stream=0))
    tracker.add_block(make_block("b0", stream=1))
    tracker.add_block(make_block("a1", stream=0))  # a retry: same block, same number, nothing new
    assert numbered(tracker, 0) == [(0, "a0"), (1, "a1"), (2, "a2")]
    assert numbered(tracker, 1) == [(0, "b0")]
    assert numbered(tracker, 0, 1, until_seq=2) == [(1, "a1")]
    assert numbered(tracker, 0, max_records=15) == [(0, "a0")]  # 10 records each: one fits
    assert numbered(tracker, 0, 2, max_records=1) == [(2, "a2")]  # at least one block
    assert tracker.seq_bounds(0) == (0, 3) and tracker.seq_bounds(7) == (0, 0)


def test_a_duplicate_kafka_block_gets_no_number() -> None:
    tracker = ReceivedBlockTracker()
    tracker.add_block(make_block("k0", ranges=(("t", 0, 0, 10),)))
    assert tracker.add_block(make_block("k0-again", ranges=(("t", 0, 0, 10),))).accepted is False
    tracker.add_block(make_block("k1", ranges=(("t", 0, 10, 20),)))
    assert numbered(tracker, 0) == [(0, "k0"), (1, "k1")]


def test_commit_drops_the_committed_blocks_once_and_logs_it(tmp_path: Path) -> None:
    service, wal = open_service(tmp_path)
    tracker = service.tracker
    for i in range(4):
        tracker.add_block(make_block(f"a{i}", records=5))
    gone = tracker.commit_blocks(0, 2)
    assert [b.block_id for b in gone] == ["a0", "a1"]
    assert numbered(tracker, 0) == [(2, "a2"), (3, "a3")]
    assert tracker.seq_bounds(0) == (2, 4)
    assert tracker.unallocated_counts()[0] == (2, 10)
    assert tracker.commit_blocks(0, 2) == [] and tracker.commit_blocks(0, 1) == []  # already gone
    wal.close()
    events = [event_from_wire(e) for e in WriteAheadLog(tmp_path, fsync=False).recover().events]
    assert [e for e in events if isinstance(e, BlocksCommitted)] == [BlocksCommitted(0, 2)]
    assert [e.seq for e in events if isinstance(e, BlockAdded)] == [0, 1, 2, 3]


@pytest.mark.parametrize("roll", [False, True], ids=["log only", "snapshot"])
def test_a_restarted_tracker_gives_every_block_the_same_number(tmp_path: Path, roll: bool) -> None:
    service, wal = open_service(tmp_path)
    for i in range(5):
        service.tracker.add_block(make_block(f"a{i}"))
    service.tracker.add_block(make_block("b0", stream=1))
    service.tracker.commit_blocks(0, 2)
    if roll:
        wal.roll(service.snapshot())
    service.tracker.add_block(make_block("a5"))
    before = numbered(service.tracker, 0)
    wal.close()

    again, wal = open_service(tmp_path)
    assert numbered(again.tracker, 0) == before == [(2, "a2"), (3, "a3"), (4, "a4"), (5, "a5")]
    assert numbered(again.tracker, 1) == [(0, "b0")]
    again.tracker.add_block(make_block("a6"))  # numbering goes on where it stopped
    assert numbered(again.tracker, 0, 6) == [(6, "a6")]
    assert again.tracker.seq_bounds(0) == (2, 7)
    wal.close()


def test_a_committed_stream_stays_numbered_after_a_restart_with_an_empty_queue(tmp_path: Path) -> None:
    service, wal = open_service(tmp_path)
    for i in range(3):
        service.tracker.add_block(make_block(f"a{i}"))
    service.tracker.commit_blocks(0, 3)
    wal.roll(service.snapshot())
    wal.close()
    again, wal = open_service(tmp_path)
    assert again.tracker.seq_bounds(0) == (3, 3)  # not back to 0: a query's offset 3 stays valid
    wal.close()


def test_a_log_written_before_numbers_existed_numbers_its_blocks_in_order() -> None:
    tracker = ReceivedBlockTracker()
    for i in range(3):
        old = make_block(f"a{i}").to_wire()
        tracker.apply(event_from_wire({"type": "BlockAdded", "block": old}))
    assert numbered(tracker, 0) == [(0, "a0"), (1, "a1"), (2, "a2")]


def test_bad_commit_and_list_events_and_requests_are_refused() -> None:
    with pytest.raises(InvalidMessage, match="BlocksCommitted.until_seq"):
        event_from_wire({"type": "BlocksCommitted", "stream_id": 0, "until_seq": "3"})
    with pytest.raises(InvalidMessage, match="BlockAdded.seq"):
        event_from_wire({"type": "BlockAdded", "block": make_block("a").to_wire(), "seq": 1.5})
    with pytest.raises(InvalidMessage, match="list_blocks.from_seq"):
        check_request({"op": "list_blocks", "id": 1, "stream_id": 0, "from_seq": "x"})
    service = TrackerService()
    with pytest.raises(InvalidMessage, match="max_records must be 1 or more"):
        service.op_list_blocks({"stream_id": 0, "from_seq": 0, "max_records": 0}, None)
    assert OPS["commit_blocks"].roles == ("driver", "admin") and OPS["commit_blocks"].mutates
    assert OPS["list_blocks"].roles == ("driver", "admin")


def test_service_ops_answer_with_numbers_and_deletable_blocks() -> None:
    service = TrackerService()
    for i in range(3):
        service.tracker.add_block(make_block(f"a{i}"))
    listed, _ = service.op_list_blocks({"stream_id": 0, "from_seq": 1}, None)
    assert listed["seqs"] == [1, 2] and [b["block_id"] for b in listed["blocks"]] == ["a1", "a2"]
    assert (listed["first_seq"], listed["next_seq"]) == (0, 3)
    committed, _ = service.op_commit_blocks({"stream_id": 0, "until_seq": 2}, None)
    assert [b["block_id"] for b in committed["deletable"]] == ["a0", "a1"]
    assert service.status()["streams"][0]["unallocated_blocks"] == 1
