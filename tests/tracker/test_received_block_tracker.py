"""Spark's ReceivedBlockTrackerSuite behaviours, plus Sluice's exactly-once trimming.

The tracker is pure; its log here is a real WriteAheadLog in tmp_path (or one that fails on
purpose), and recovery is a new tracker replaying what the log holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from sluice.tracker.log.events import Event, LogWriteFailed, event_from_wire
from sluice.tracker.log.wal import WriteAheadLog
from sluice.tracker.server.received_block_tracker import ReceivedBlockTracker, TrackerSnapshot
from tests.tracker.conftest import make_block


def open_tracker(wal_dir: Path) -> tuple[ReceivedBlockTracker, WriteAheadLog]:
    """Recover a tracker from ``wal_dir`` the way the service does, then log to it."""
    wal = WriteAheadLog(wal_dir, fsync=False)
    recovered = wal.recover()
    tracker = ReceivedBlockTracker()
    snap = recovered.snapshot
    if snap is not None:
        assert isinstance(snap, dict)
        tracker.restore(snap["tracker"] if "tracker" in snap else cast(TrackerSnapshot, snap))
    for event in recovered.events:
        tracker.apply(event_from_wire(event))
    tracker.log = wal
    return tracker, wal


class FailingLog:
    """A log whose writes fail while ``failing`` is set (a full disk, a lost volume)."""

    def __init__(self, inner: WriteAheadLog) -> None:
        self.inner = inner
        self.failing = False
        self.fail_types: set[str] = set()

    def write(self, event: Event) -> None:
        if self.failing and (not self.fail_types or type(event).__name__ in self.fail_types):
            raise OSError("No space left on device")
        self.inner.write(event)


def ids(blocks) -> list[str]:
    return [b.block_id for b in blocks]


def test_allocates_all_unallocated_blocks_of_every_stream(tmp_path: Path) -> None:
    tracker, _ = open_tracker(tmp_path)
    for i in range(5):
        tracker.add_block(make_block(f"a{i}", stream=0))
    tracker.add_block(make_block("b0", stream=1))
    assert tracker.has_unallocated_blocks()
    allocation = tracker.allocate_blocks(1000)
    assert ids(allocation[0]) == [f"a{i}" for i in range(5)] and ids(allocation[1]) == ["b0"]
    assert not tracker.has_unallocated_blocks()
    assert ids(tracker.get_blocks_of_batch(1000)[0]) == ids(allocation[0])
    assert ids(tracker.get_blocks_of_batch_and_stream(1000, 1)) == ["b0"]
    assert tracker.get_blocks_of_batch(2000) == {}


def test_reallocating_an_old_time_is_a_no_op(tmp_path: Path) -> None:
    tracker, _ = open_tracker(tmp_path)
    tracker.add_block(make_block("a"))
    first = tracker.allocate_blocks(1000)
    tracker.add_block(make_block("b"))
    assert tracker.allocate_blocks(1000) is None
    assert tracker.allocate_blocks(500) is None
    assert ids(tracker.get_blocks_of_batch(1000)[0]) == ids(first[0]) == ["a"]
    assert ids(tracker.get_unallocated_blocks(0)) == ["b"]  # still waiting for a later batch
    assert tracker.last_allocated_ms == 1000


def test_a_later_time_gets_nothing_when_nothing_was_added(tmp_path: Path) -> None:
    tracker, _ = open_tracker(tmp_path)
    tracker.add_block(make_block("a"))
    tracker.allocate_blocks(1000)
    assert tracker.allocate_blocks(2000) == {0: []}
    assert tracker.get_blocks_of_batch(2000) == {0: []}
    assert tracker.last_allocated_ms == 2000


def test_recovery_removes_only_the_allocated_blocks(tmp_path: Path) -> None:
    tracker, wal = open_tracker(tmp_path)
    for i in range(3):
        tracker.add_block(make_block(f"a{i}"))
    tracker.allocate_blocks(1000)
    for i in range(3, 5):
        tracker.add_block(make_block(f"a{i}"))
    wal.close()

    recovered, _ = open_tracker(tmp_path)
    assert ids(recovered.get_blocks_of_batch(1000)[0]) == ["a0", "a1", "a2"]
    assert ids(recovered.get_unallocated_blocks(0)) == ["a3", "a4"]
    assert recovered.last_allocated_ms == 1000
    assert recovered.allocate_blocks(1000) is None  # the recovery re-run of a batch changes nothing
    assert ids(recovered.allocate_blocks(2000)[0]) == ["a3", "a4"]


def test_failing_log_write_during_allocation_loses_no_block(tmp_path: Path) -> None:
    tracker, wal = open_tracker(tmp_path)
    failing = FailingLog(wal)
    tracker.log = failing
    for i in range(4):
        tracker.add_block(make_block(f"a{i}"))
    failing.failing = True
    with pytest.raises(LogWriteFailed):
        tracker.allocate_blocks(1000)
    assert ids(tracker.get_unallocated_blocks(0)) == [f"a{i}" for i in range(4)]
    assert tracker.last_allocated_ms is None and tracker.get_blocks_of_batch(1000) == {}
    failing.failing = False
    assert ids(tracker.allocate_blocks(2000)[0]) == [f"a{i}" for i in range(4)]
    wal.close()
    recovered, _ = open_tracker(tmp_path)
    assert ids(recovered.get_blocks_of_batch(2000)[0]) == [f"a{i}" for i in range(4)]
    assert recovered.get_blocks_of_batch(1000) == {} and not recovered.has_unallocated_blocks()


def test_failing_log_write_of_a_block_adds_nothing(tmp_path: Path) -> None:
    tracker, wal = open_tracker(tmp_path)
    failing = FailingLog(wal)
    tracker.log = failing
    failing.failing = True
    with pytest.raises(LogWriteFailed):
        tracker.add_block(make_block("a", ranges=(("t", 0, 0, 10),)))
    assert not tracker.has_unallocated_blocks()
    failing.failing = False
    # The offsets were not marked as added either: the retry is accepted whole.
    result = tracker.add_block(make_block("a", ranges=(("t", 0, 0, 10),)))
    assert result.accepted and result.info.offset_ranges[0].from_offset == 0


def test_cleanup_then_recovery(tmp_path: Path) -> None:
    tracker, wal = open_tracker(tmp_path)
    for t in (1000, 2000, 3000):
        tracker.add_block(make_block(f"b{t}"))
        tracker.allocate_blocks(t)
    deleted = tracker.cleanup_old_batches(2000)  # strictly older: only batch 1000
    assert ids(deleted) == ["b1000"]
    assert tracker.batch_times() == [2000, 3000]
    assert tracker.cleanup_old_batches(2000) == []
    wal.close()
    recovered, _ = open_tracker(tmp_path)
    assert recovered.batch_times() == [2000, 3000]
    assert recovered.get_blocks_of_batch(1000) == {}
    assert ids(recovered.get_blocks_of_batch(3000)[0]) == ["b3000"]


def test_failing_cleanup_write_keeps_the_batches(tmp_path: Path) -> None:
    tracker, wal = open_tracker(tmp_path)
    failing = FailingLog(wal)
    tracker.log = failing
    tracker.add_block(make_block("a"))
    tracker.allocate_blocks(1000)
    failing.failing = True
    assert tracker.cleanup_old_batches(5000) == []
    assert tracker.batch_times() == [1000]


def test_completed_only_cleanup_keeps_unfinished_batches(tmp_path: Path) -> None:
    tracker, _ = open_tracker(tmp_path)
    for t in (1000, 2000):
        tracker.add_block(make_block(f"b{t}"))
        tracker.allocate_blocks(t)
    assert tracker.pending_batches() == [1000, 2000]
    assert tracker.batch_completed(2000, {"batch_time_ms": 2000})
    assert not tracker.batch_completed(2000, {"batch_time_ms": 2000})  # once
    assert tracker.pending_batches() == [1000]
    assert ids(tracker.cleanup_old_batches(3000, completed_only=True)) == ["b2000"]
    assert tracker.batch_times() == [1000]


def test_add_block_is_idempotent_on_block_id(tmp_path: Path) -> None:
    tracker, wal = open_tracker(tmp_path)
    first = tracker.add_block(make_block("a", ranges=(("t", 0, 0, 10),)))
    again = tracker.add_block(make_block("a", ranges=(("t", 0, 0, 10),)))
    assert first == again and again.accepted
    assert ids(tracker.get_unallocated_blocks(0)) == ["a"]
    wal.close()
    recovered, _ = open_tracker(tmp_path)
    assert recovered.add_block(make_block("a", ranges=(("t", 0, 0, 10),))).accepted
    assert ids(recovered.get_unallocated_blocks(0)) == ["a"]


def test_block_entirely_below_the_added_offsets_is_dropped(tmp_path: Path) -> None:
    tracker, wal = open_tracker(tmp_path)
    tracker.add_block(make_block("a", records=10, ranges=(("t", 0, 0, 10), ("t", 1, 0, 5))))
    result = tracker.add_block(make_block("a-reread", records=8, ranges=(("t", 0, 2, 10),)))
    assert result.accepted is False and result.info is None
    assert ids(tracker.get_unallocated_blocks(0)) == ["a"]
    # Another stream reading the same topic has its own marks.
    assert tracker.add_block(make_block("other", stream=1, ranges=(("t", 0, 0, 10),))).accepted
    wal.close()
    recovered, _ = open_tracker(tmp_path)  # the marks survive a restart
    assert recovered.add_block(make_block("a-again", ranges=(("t", 0, 0, 10),))).accepted is False


def test_overlapping_block_is_recorded_with_trimmed_ranges(tmp_path: Path) -> None:
    tracker, _ = open_tracker(tmp_path)
    tracker.add_block(make_block("a", records=10, ranges=(("t", 0, 0, 10),)))
    result = tracker.add_block(make_block("b", records=10, ranges=(("t", 0, 5, 15), ("t", 1, 0, 3))))
    assert result.accepted
    assert [(r.partition, r.from_offset, r.until_offset) for r in result.info.offset_ranges] == [(0, 10, 15), (1, 0, 3)]
    assert result.info.num_records == 5
    queued = tracker.get_unallocated_blocks(0)[1]
    assert queued.offset_ranges == result.info.offset_ranges
    counts = tracker.unallocated_counts()[0]
    assert counts == (2, 15)


def test_blocks_without_offsets_are_never_trimmed(tmp_path: Path) -> None:
    tracker, _ = open_tracker(tmp_path)
    assert tracker.add_block(make_block("a")).accepted
    assert tracker.add_block(make_block("b")).accepted
    assert ids(tracker.allocate_blocks(1)[0]) == ["a", "b"]


# --- bounded batches (a departure from Spark: a backlog drains over several batches) -------------


def test_a_bounded_batch_takes_queued_blocks_in_order_while_they_fit(tmp_path: Path) -> None:
    tracker, _ = open_tracker(tmp_path)
    for i, records in enumerate([40, 30, 20, 50, 10]):
        tracker.add_block(make_block(f"a{i}", records=records))
    tracker.add_block(make_block("b0", stream=1, records=1000))
    first = tracker.allocate_blocks(1000, {0: 100})
    # 40 + 30 + 20 = 90 fit; a3 (50) does not, and a4 (10) may not jump the queue
    assert ids(first[0]) == ["a0", "a1", "a2"] and ids(first[1]) == ["b0"]  # stream 1 not named: unbounded
    assert ids(tracker.get_unallocated_blocks(0)) == ["a3", "a4"]
    assert tracker.unallocated_counts()[0] == (2, 60)
    assert ids(tracker.allocate_blocks(2000, {0: 100})[0]) == ["a3", "a4"]
    assert tracker.unallocated_counts()[0] == (0, 0)


def test_a_block_larger_than_the_bound_still_goes_alone(tmp_path: Path) -> None:
    tracker, _ = open_tracker(tmp_path)
    tracker.add_block(make_block("big", records=5000))
    tracker.add_block(make_block("small", records=1))
    assert ids(tracker.allocate_blocks(1000, {0: 10})[0]) == ["big"]
    assert ids(tracker.allocate_blocks(2000, {0: 10})[0]) == ["small"]
    assert tracker.allocate_blocks(3000, {0: 10})[0] == []


def test_recovery_replays_a_bounded_allocation_exactly(tmp_path: Path) -> None:
    tracker, wal = open_tracker(tmp_path)
    for i in range(6):
        tracker.add_block(make_block(f"a{i}", records=10))
    tracker.allocate_blocks(1000, {0: 25})
    tracker.allocate_blocks(2000, {0: 10})
    wal.close()
    recovered, wal = open_tracker(tmp_path)
    assert ids(recovered.get_blocks_of_batch(1000)[0]) == ["a0", "a1"]
    assert ids(recovered.get_blocks_of_batch(2000)[0]) == ["a2"]
    assert ids(recovered.get_unallocated_blocks(0)) == ["a3", "a4", "a5"]
    assert recovered.unallocated_counts()[0] == (3, 30)
    # and through a snapshot
    again = ReceivedBlockTracker()
    again.restore(recovered.snapshot())
    assert ids(again.allocate_blocks(3000, {0: 20})[0]) == ["a3", "a4"]


def test_dropped_and_trimmed_blocks_are_counted(tmp_path: Path) -> None:
    from sluice.tracker.server.metrics import sample

    def count(action: str) -> float:
        return sample("sluice_tracker_duplicate_blocks_total", {"stream": "7", "action": action})

    tracker, _ = open_tracker(tmp_path)
    before = count("dropped"), count("trimmed")
    tracker.add_block(make_block("a", stream=7, ranges=(("t", 0, 0, 10),)))
    tracker.add_block(make_block("a", stream=7, ranges=(("t", 0, 0, 10),)))  # a retry: neither
    tracker.add_block(make_block("b", stream=7, ranges=(("t", 0, 0, 10),)))  # re-read whole
    tracker.add_block(make_block("c", stream=7, ranges=(("t", 0, 5, 15),)))  # re-read in part
    assert (count("dropped") - before[0], count("trimmed") - before[1]) == (1, 1)


def test_describe_names_the_pending_batches_a_restarted_driver_will_be_handed() -> None:
    tracker = ReceivedBlockTracker()
    for i in range(3):
        tracker.add_block(make_block(f"b{i}", records=5))
    tracker.allocate_blocks(10_000, {0: 5})  # one block of five records
    tracker.allocate_blocks(20_000, {0: 5})
    tracker.batch_completed(10_000, {})
    assert tracker.describe() == (
        "1 unallocated blocks (5 records), 2 batches remembered, 1 pending (20000), last allocated 20000"
    )
