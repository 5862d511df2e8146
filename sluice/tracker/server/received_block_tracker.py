"""Spark's ``ReceivedBlockTracker``: which stored blocks exist and which batch each belongs to.

A pure state machine (no I/O of its own, no asyncio): every change is first written to an
:class:`~sluice.tracker.log.events.EventLog` and applied only if the write succeeded, so a failed log write
leaves the state exactly as it was (Spark 3.x semantics).  Recovery replays the same events through :meth:`apply`.

Beyond Spark, it makes each source record enter exactly one block: its
:class:`~sluice.tracker.server.offset_marks.OffsetMarks` drop a block a restarted receiver re-read and
trim one that overlaps what was added.  And a batch may be bounded: the driver
names, per stream, the most records a batch should take (its rate times the batch interval), and
the queued blocks past that wait for the following batches instead of piling into one.

Each queued block also gets its stream's next sequence number, logged with it, so a replay or a
snapshot gives it the same number again.  Structured Streaming reads by these numbers instead of
allocating batches: ``list_blocks`` shows a range of queued blocks without taking them, and
``commit_blocks`` drops the ones a query has finished (Spark's source ``commit(end)``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, KeysView, Mapping
from typing import NotRequired, TypedDict

from sluice.block_columns import BlockColumns
from sluice.block_info import InvalidMessage, ReceivedBlockInfo
from sluice.tracker.log.events import (
    BatchAllocated,
    BatchCleanup,
    BatchCompleted,
    BlockAdded,
    BlocksCommitted,
    Event,
    EventLog,
    LogWriteFailed,
    NullLog,
)
from sluice.tracker.server.metrics import BLOCKS_DROPPED
from sluice.tracker.server.offset_marks import MarkRow, OffsetMarks
from sluice.tracker.server.stream_queue import StreamQueue
from sluice.tracker.wire.messages import WireMap
from sluice.tracker.wire.results import AddBlockResult

log = logging.getLogger(__name__)

Allocation = dict[int, list[ReceivedBlockInfo]]
WireAllocation = dict[int, list[WireMap]]


class TrackerSnapshot(TypedDict):
    """:meth:`ReceivedBlockTracker.snapshot`: tuples are arrays in msgpack and lists read back,
    and a snapshot older than sequence numbers has no ``streams``, ``seq`` or ``next_seq``."""

    unallocated: list[WireMap]
    streams: NotRequired[list[int]]
    batches: list[tuple[int, WireAllocation, bool]]  # batch time, its blocks, completed
    last_allocated_ms: int | None
    high: list[MarkRow]
    seq: NotRequired[list[int]]
    next_seq: NotRequired[list[tuple[int, int]]]  # stream, the number its next block takes


class ReceivedBlockTracker:
    """A :class:`StreamQueue` per stream, allocations per batch time, exactly-once offset marks.

    :param log_: where every change is written before it is made; ``None``: no log.
    :param stream_ids: streams known from the start (others appear with their first block).
    """

    def __init__(self, log_: EventLog | None = None, stream_ids: Iterable[int] = ()) -> None:
        self.log: EventLog = log_ if log_ is not None else NullLog()
        self._queues: dict[int, StreamQueue] = {s: StreamQueue() for s in stream_ids}
        # stream -> the number its next block gets, for a stream whose empty queue was dropped:
        # a query's checkpointed numbers must not be handed out again when it comes back
        self._dropped_next_seq: dict[int, int] = {}
        self._batches: dict[int, Allocation] = {}
        self._completed: set[int] = set()
        self.last_allocated_ms: int | None = None
        # block id -> (the block as recorded, its wire map built once for replies and snapshots),
        # for every block queued or in a remembered batch
        self._known: dict[str, tuple[ReceivedBlockInfo, dict]] = {}
        self._marks = OffsetMarks()

    # --- writes ------------------------------------------------------------------------------

    def _write(self, event: Event) -> None:
        try:
            self.log.write(event)
        except Exception as exc:
            kind = type(event).__name__
            log.warning("could not log %s: %s", kind, exc)
            raise LogWriteFailed(f"could not log {kind}: {exc}") from exc

    def add_block(self, info: ReceivedBlockInfo) -> AddBlockResult:
        """Log then queue the block (trimmed to its new offsets); idempotent on block id.

        Raises :class:`LogWriteFailed` when the log refused the event; nothing changed then.
        """
        known = self._known.get(info.block_id)
        if known is not None:
            return AddBlockResult(True, known[0])
        trimmed = self._marks.trim(info)
        if trimmed is None:
            BLOCKS_DROPPED.labels(str(info.stream_id), "dropped").inc()
            return AddBlockResult(False, None)
        wire = trimmed.to_wire()
        queue = self._queues.get(trimmed.stream_id)
        seq = queue.next_seq if queue is not None else self._dropped_next_seq.get(trimmed.stream_id, 0)
        self._write(BlockAdded(trimmed, wire, seq))
        self._enqueue(trimmed, wire, seq)
        if trimmed is not info:
            BLOCKS_DROPPED.labels(str(info.stream_id), "trimmed").inc()
        return AddBlockResult(True, trimmed)

    def _enqueue(self, info: ReceivedBlockInfo, wire: dict | None = None, seq: int | None = None) -> None:
        """Queue ``info`` as its stream's ``seq``-th block (``None``: the next number, for old logs)."""
        self._queue(info.stream_id).append(info, seq)
        self._known[info.block_id] = (info, wire if wire is not None else info.to_wire())
        self._marks.add(info)

    def _queue(self, stream_id: int) -> StreamQueue:
        """The stream's queue, made (numbering on where a dropped one stopped) if it has none."""
        queue = self._queues.get(stream_id)
        if queue is None:
            queue = self._queues[stream_id] = StreamQueue(self._dropped_next_seq.pop(stream_id, 0))
        return queue

    def allocate_blocks(self, batch_time_ms: int, max_records: Mapping[int, int] | None = None) -> Allocation | None:
        """Each stream's unallocated blocks into this batch; None if not later than the last one.

        ``max_records`` bounds a stream's batch (streams it does not name are not bounded): its
        queued blocks are taken in block order while their records fit, always at least one (a
        block larger than the bound must not stall the stream); the rest wait for the following
        batches.  Spark hands every unallocated block to the next batch instead.

        The allocation (the ids taken) is logged before the queues change: if the log write fails
        (:class:`LogWriteFailed`), the blocks stay queued and the next batch gets them.
        """
        return None if self.allocate_columns(batch_time_ms, max_records) is None else self._batches[batch_time_ms]

    def allocate_columns(
        self, batch_time_ms: int, max_records: Mapping[int, int] | None = None
    ) -> dict[int, BlockColumns] | None:
        """:meth:`allocate_blocks`, returning the reply columns of the blocks taken (kept as they were queued)."""
        if self.last_allocated_ms is not None and batch_time_ms <= self.last_allocated_ms:
            log.info(
                "batch %d is not later than the last allocated batch %d: nothing allocated",
                batch_time_ms,
                self.last_allocated_ms,
            )
            return None
        limits = max_records or {}
        counts = {s: q.fitting(limits.get(s)) for s, q in self._queues.items()}
        # the ids come from the kept reply columns (a slice in C, not an attribute read per block)
        ids = {s: self._queues[s].columns.block_ids[:k] for s, k in counts.items()}
        self._write(BatchAllocated(batch_time_ms, ids))
        allocation: Allocation = {}
        taken: dict[int, BlockColumns] = {}
        for s, k in counts.items():
            queue = self._queues[s]
            allocation[s], taken[s] = queue.take(k)
            if queue:
                log.debug(
                    "batch %d: stream %d bounded at %d records; %d block(s) wait for the next batches",
                    batch_time_ms,
                    s,
                    limits[s],
                    len(queue),
                )
        self._batches[batch_time_ms] = allocation
        self.last_allocated_ms = batch_time_ms
        return taken

    def commit_blocks(self, stream_id: int, until_seq: int) -> list[ReceivedBlockInfo]:
        """Drop the stream's queued blocks numbered below ``until_seq``; they may now be deleted.

        Logged (``BlocksCommitted``) before the queue changes; committing what is already gone
        logs nothing and returns nothing, so a query that commits the same end twice is harmless.
        """
        queue = self._queues.get(stream_id)
        if not queue or queue.first_seq >= until_seq:
            return []
        self._write(BlocksCommitted(stream_id, until_seq))
        return self._drop_committed(stream_id, until_seq)

    def _drop_committed(self, stream_id: int, until_seq: int) -> list[ReceivedBlockInfo]:
        queue = self._queues.get(stream_id)
        gone = queue.drop_below(until_seq) if queue is not None else []
        for block in gone:
            self._known.pop(block.block_id, None)
        return gone

    def batch_completed(self, batch_time_ms: int, info: dict) -> bool:
        """Log that an allocated batch finished; False (nothing logged) if unknown or done."""
        if batch_time_ms not in self._batches or batch_time_ms in self._completed:
            return False
        self._write(BatchCompleted(batch_time_ms, info))
        self._completed.add(batch_time_ms)
        return True

    def cleanup_old_batches(self, threshold_ms: int, completed_only: bool = False) -> list[ReceivedBlockInfo]:
        """Forget batches strictly older than ``threshold_ms``; their blocks may now be deleted.

        ``completed_only`` keeps batches the driver has not finished (the service uses it, so a
        slow batch never loses its blocks); Spark's own call drops every older batch.
        A failed log write changes nothing and returns no blocks.
        """
        times = sorted(t for t in self._batches if t < threshold_ms and (not completed_only or t in self._completed))
        if not times:
            return []
        try:
            self._write(BatchCleanup(times))
        except LogWriteFailed:
            return []
        return self._forget(times)

    def cleanable_batches(self, threshold_ms: int) -> dict[int, list[ReceivedBlockInfo]]:
        """Completed batches strictly older than ``threshold_ms`` and their blocks, still remembered.

        The service names them to the driver, which deletes the blocks and says so in its next
        ``batch_completed``; only then does the service forget them (:meth:`cleanup_old_batches`):
        delete first, forget after, so a driver killed in between is told again and no block file
        outlives what the tracker knows.
        """
        return {
            t: [b for blocks in self._batches[t].values() for b in blocks]
            for t in sorted(self._completed)
            if t < threshold_ms
        }

    def _forget(self, times: Iterable[int]) -> list[ReceivedBlockInfo]:
        gone: list[ReceivedBlockInfo] = []
        for t in times:
            allocation = self._batches.pop(t, None)
            self._completed.discard(t)
            for blocks in (allocation or {}).values():
                for b in blocks:
                    self._known.pop(b.block_id, None)
                gone.extend(blocks)
        return gone

    def forget_stream(self, stream_id: int, idle_marks: int = 1_024) -> list[int]:
        """Drop an empty stream's queue; its offset marks stay, for at most ``idle_marks`` idle streams
        (:meth:`OffsetMarks.set_idle`).  Returns the streams whose marks went to hold that bound."""
        queue = self._queues.get(stream_id)
        if queue is None or queue:
            return []
        del self._queues[stream_id]
        if queue.next_seq:
            self._dropped_next_seq[stream_id] = queue.next_seq
        return self._marks.set_idle(stream_id, idle_marks)

    def stream_ids(self) -> KeysView[int]:
        return self._queues.keys()

    def is_known(self, block_id: str) -> bool:
        return block_id in self._known

    def queued(self, stream_id: int) -> tuple[int, int]:
        """(blocks, records) queued for the stream."""
        queue = self._queues.get(stream_id)
        return (len(queue), queue.records) if queue is not None else (0, 0)

    def partitions(self, stream_id: int) -> int:
        return self._marks.partitions(stream_id)

    def new_partitions(self, info: ReceivedBlockInfo) -> int:
        return self._marks.new_partitions(info)

    # --- reads -------------------------------------------------------------------------------

    def wire(self, info: ReceivedBlockInfo) -> WireMap:
        """The block's wire map (cached: replies of 10,000 blocks must not rebuild them)."""
        known = self._known.get(info.block_id)
        return known[1] if known is not None else info.to_wire()

    def wire_allocation(self, allocation: Allocation) -> WireAllocation:
        known = self._known
        return {
            s: [k[1] if (k := known.get(b.block_id)) is not None else b.to_wire() for b in blocks]
            for s, blocks in allocation.items()
        }

    def get_blocks_of_batch(self, batch_time_ms: int) -> Allocation:
        return {s: list(b) for s, b in self._batches.get(batch_time_ms, {}).items()}

    def get_blocks_of_batch_and_stream(self, batch_time_ms: int, stream_id: int) -> list[ReceivedBlockInfo]:
        return list(self._batches.get(batch_time_ms, {}).get(stream_id, ()))

    def get_unallocated_blocks(self, stream_id: int) -> list[ReceivedBlockInfo]:
        return list(self._queues.get(stream_id, ()))

    def list_blocks(
        self, stream_id: int, from_seq: int, until_seq: int | None = None, max_records: int | None = None
    ) -> list[tuple[int, ReceivedBlockInfo]]:
        """The stream's queued blocks numbered ``from_seq <= seq < until_seq``, with their numbers,
        in order, without taking them; ``max_records`` keeps the head whose records fit (at least one
        block, as ``allocate_blocks``)."""
        queue = self._queues.get(stream_id)
        return queue.listed(from_seq, until_seq, max_records) if queue is not None else []

    def seq_bounds(self, stream_id: int) -> tuple[int, int]:
        """(number of the stream's oldest queued block, number its next block gets); equal when none
        is queued."""
        queue = self._queues.get(stream_id)
        if queue is None:
            next_seq = self._dropped_next_seq.get(stream_id, 0)
            return next_seq, next_seq
        return queue.first_seq, queue.next_seq

    def has_unallocated_blocks(self) -> bool:
        return any(self._queues.values())

    def unallocated_counts(self) -> dict[int, tuple[int, int]]:
        return {s: (len(q), q.records) for s, q in self._queues.items()}

    def pending_batches(self) -> list[int]:
        return sorted(t for t in self._batches if t not in self._completed)

    def describe(self) -> str:
        """The state in one line, for the log when it is loaded or snapshotted: what a restarted
        driver will be handed (pending batches) and what the next batches take (queued blocks)."""
        counts = self.unallocated_counts().values()
        pending = self.pending_batches()
        shown = ", ".join(map(str, pending[:3])) + (", ..." if len(pending) > 3 else "")
        return (
            f"{sum(b for b, _ in counts)} unallocated blocks ({sum(r for _, r in counts)} records), "
            f"{len(self._batches)} batches remembered, {len(pending)} pending"
            + (f" ({shown})" if pending else "")
            + f", last allocated {self.last_allocated_ms}"
        )

    def batch_times(self) -> list[int]:
        return sorted(self._batches)

    # --- recovery ----------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Replay one logged event (no logging); raises :class:`InvalidMessage` on an event not its own."""
        match event:
            case BlockAdded(block=info, block_wire=wire, seq=seq):
                if info.block_id not in self._known:
                    self._enqueue(info, wire, seq)
            case BlocksCommitted(stream_id=stream_id, until_seq=until_seq):
                self._drop_committed(stream_id, until_seq)
            case BatchAllocated(time_ms=time_ms, blocks=ids):
                self._replay_allocation(time_ms, ids)
            case BatchCompleted(time_ms=time_ms):
                if time_ms in self._batches:
                    self._completed.add(time_ms)
            case BatchCleanup(times=times):
                self._forget(times)
            case _:
                raise InvalidMessage(f"not a block tracker event: {type(event).__name__}")

    def _replay_allocation(self, time_ms: int, ids: dict[int, list[str]]) -> None:
        """Take exactly the allocated blocks out of the queues (Spark 3.x), keep the rest queued."""
        allocation: Allocation = {}
        for s, block_ids in ids.items():
            wanted = set(block_ids)
            taken = self._queue(s).remove(wanted)
            if len(taken) != len(wanted):
                log.warning(
                    "replaying batch %d: %d of stream %d's allocated blocks were not in the log",
                    time_ms,
                    len(wanted) - len(taken),
                    s,
                )
            allocation[s] = taken
        self._batches[time_ms] = allocation
        if self.last_allocated_ms is None or time_ms > self.last_allocated_ms:
            self.last_allocated_ms = time_ms

    def snapshot(self) -> TrackerSnapshot:
        """Live state as one msgpack-able map (fresh containers: safe to encode in a thread)."""
        return {
            "unallocated": [self.wire(b) for q in self._queues.values() for b in q],
            "streams": list(self._queues),
            "batches": [(t, self.wire_allocation(a), t in self._completed) for t, a in sorted(self._batches.items())],
            "last_allocated_ms": self.last_allocated_ms,
            "high": self._marks.snapshot(),
            "seq": [seq for q in self._queues.values() for seq, _ in q.numbered()],
            "next_seq": [(s, q.next_seq) for s, q in self._queues.items() if q.next_seq]
            + [(s, n) for s, n in self._dropped_next_seq.items()],
        }

    def restore(self, snap: TrackerSnapshot) -> None:
        """Load a :meth:`snapshot` into an empty tracker."""
        for s in snap.get("streams", []):
            self._queue(int(s))
        seqs: list[int | None] = [*snap.get("seq", ())]
        if not seqs:  # absent in older snapshots
            seqs = [None] * len(snap["unallocated"])
        for s, n in snap.get("next_seq", []):
            if int(s) in self._queues:
                self._queues[int(s)].next_seq = int(n)
            else:
                self._dropped_next_seq[int(s)] = int(n)
        for wire, seq in zip(snap["unallocated"], seqs):
            self._enqueue(ReceivedBlockInfo.from_wire(wire), wire, seq)
        for t, allocation, completed in snap["batches"]:
            blocks: Allocation = {}
            for s, wires in allocation.items():
                blocks[int(s)] = [ReceivedBlockInfo.from_wire(w) for w in wires]
                for b, w in zip(blocks[int(s)], wires):
                    self._known[b.block_id] = (b, w)
            self._batches[int(t)] = blocks
            if completed:
                self._completed.add(int(t))
        self.last_allocated_ms = snap["last_allocated_ms"]
        self._marks.restore(snap["high"])
