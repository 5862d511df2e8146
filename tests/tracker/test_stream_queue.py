"""``StreamQueue``'s invariants across random add / allocate / commit / cleanup / forget / restart runs.

The tracker is driven through its public methods; a plain model (a list of ``(seq, block id,
records)`` per stream and each stream's next number) says what every queue must hold.  After each
step every queue must agree with the model, and with itself: columns, record count and numbers
describe exactly its blocks.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.block_columns import BlockColumns
from sluice.tracker.log.events import Event, event_from_wire
from sluice.tracker.server.received_block_tracker import ReceivedBlockTracker, TrackerSnapshot
from sluice.tracker.server.stream_queue import StreamQueue
from tests.tracker.conftest import make_block

STREAMS = range(3)


class ListLog:
    """Events as the WAL stores them (their wire form), for replay."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def write(self, event: Event) -> None:
        self.events.append(msgpack.unpackb(msgpack.packb(event.to_wire()), strict_map_key=False))


def check_queue(queue: StreamQueue) -> None:
    """What a queue keeps beside its blocks describes exactly its blocks."""
    blocks = list(queue)
    numbers = [seq for seq, _ in queue.numbered()]
    assert [b for _, b in queue.numbered()] == blocks
    assert len(queue) == len(blocks)
    assert queue.columns == BlockColumns(blocks)
    assert queue.records == sum(b.num_records for b in blocks)
    assert numbers == sorted(set(numbers)), "numbers rise strictly in queue order"
    assert all(seq < queue.next_seq for seq in numbers)
    assert queue.first_seq == (numbers[0] if numbers else queue.next_seq)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(STREAMS), st.lists(st.integers(1, 30), min_size=1, max_size=4)),
        st.tuples(st.just("add_again"), st.integers(0, 50)),
        st.tuples(st.just("allocate"), st.none() | st.integers(1, 40)),
        st.tuples(st.just("commit"), st.sampled_from(STREAMS), st.integers(0, 20)),
        st.tuples(st.just("cleanup"), st.booleans()),
        st.tuples(st.just("forget"), st.sampled_from(STREAMS)),
        st.tuples(st.just("snapshot")),
        st.tuples(st.just("restart")),
    ),
    max_size=60,
)


class Model:
    """What the tracker must hold: each stream's queue as ``(seq, block id, records)`` and its next
    number, every block ever added, and the ids each remembered batch took."""

    def __init__(self) -> None:
        self.queued: dict[int, list[tuple[int, str, int]]] = {s: [] for s in STREAMS}
        self.next_seq = dict.fromkeys(STREAMS, 0)
        self.added: list[tuple[int, str, int]] = []
        self.batches: dict[int, list[str]] = {}
        self.time_ms = 0

    def queue(self, stream: int, block_id: str, records: int) -> None:
        self.queued[stream].append((self.next_seq[stream], block_id, records))
        self.next_seq[stream] += 1

    def remembers(self, stream: int, block_id: str) -> bool:
        """A retry of a block still queued or in a remembered batch changes nothing; a block
        forgotten since (committed, cleaned up) is queued again as a new one."""
        queued = {i for _, i, _ in self.queued[stream]}
        return block_id in queued or any(block_id in ids for ids in self.batches.values())

    def allocate(self, bound: int | None) -> dict[int, list[str]]:
        self.time_ms += 1
        taken = {}
        for stream in STREAMS:
            k = _fitting([r for _, _, r in self.queued[stream]], bound)
            taken[stream] = [i for _, i, _ in self.queued[stream][:k]]
            del self.queued[stream][:k]
        self.batches[self.time_ms] = [i for ids in taken.values() for i in ids]
        return taken

    def check(self, tracker: ReceivedBlockTracker) -> None:
        for stream in STREAMS:
            queue = tracker._queues.get(stream)
            if queue is not None:
                check_queue(queue)
            queued = self.queued[stream]
            assert [(seq, b.block_id, b.num_records) for seq, b in tracker.list_blocks(stream, 0)] == queued
            first = queued[0][0] if queued else self.next_seq[stream]
            assert tracker.seq_bounds(stream) == (first, self.next_seq[stream])
            assert tracker.unallocated_counts().get(stream, (0, 0)) == (len(queued), sum(r for _, _, r in queued))


def replayed(log: ListLog, snapshot: TrackerSnapshot | None) -> ReceivedBlockTracker:
    """A restarted tracker: the snapshot, if any, then the events logged after it."""
    tracker = ReceivedBlockTracker(log)
    if snapshot is not None:
        tracker.restore(snapshot)
    for event in log.events:
        tracker.apply(event_from_wire(event))
    return tracker


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(steps)
def test_every_queue_holds_what_the_model_says_and_agrees_with_itself(run: list[tuple]) -> None:
    log, model = ListLog(), Model()
    tracker, snapshot = ReceivedBlockTracker(log), None
    for step in run:
        match step:
            case ("add", stream, sizes):
                for records in sizes:
                    block_id = f"b{len(model.added)}"
                    tracker.add_block(make_block(block_id, stream=stream, records=records))
                    model.added.append((stream, block_id, records))
                    model.queue(stream, block_id, records)
            case ("add_again", index) if model.added:
                stream, block_id, records = model.added[index % len(model.added)]
                tracker.add_block(make_block(block_id, stream=stream, records=records))
                if not model.remembers(stream, block_id):
                    model.queue(stream, block_id, records)
            case ("allocate", bound):
                expected = model.allocate(bound)
                taken = tracker.allocate_blocks(model.time_ms, None if bound is None else dict.fromkeys(STREAMS, bound))
                assert taken is not None
                assert {s: [b.block_id for b in taken.get(s, [])] for s in STREAMS} == expected
            case ("commit", stream, until):
                tracker.commit_blocks(stream, until)
                model.queued[stream] = [q for q in model.queued[stream] if q[0] >= until]
            case ("cleanup", completed_only):
                for t in tracker.pending_batches():
                    tracker.batch_completed(t, {})
                tracker.cleanup_old_batches(model.time_ms, completed_only)
                model.batches = {t: ids for t, ids in model.batches.items() if t >= model.time_ms}
            case ("forget", stream):
                tracker.forget_stream(stream)
            case ("snapshot",):
                snapshot = msgpack.unpackb(msgpack.packb(tracker.snapshot()), strict_map_key=False)
                log.events.clear()
            case ("restart",):
                tracker = replayed(log, snapshot)
        model.check(tracker)


def _fitting(records: list[int], bound: int | None) -> int:
    if bound is None:
        return len(records)
    count = total = 0
    for r in records:
        if count and total + r > bound:
            break
        total, count = total + r, count + 1
    return count
