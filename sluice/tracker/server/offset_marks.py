"""``OffsetMarks``: per stream and topic partition, the highest source offset already added.

This is what makes each source record enter exactly one block: a receiver that restarted and
re-read offsets sends blocks that overlap what was already added.  A block entirely below the mark
is dropped; a block overlapping it is recorded with its ranges trimmed, so the driver skips the
records before the trimmed start.  Only a connection holding a registration on a stream, with a
credential serving it, moves the stream's marks (the service checks that first).

The marks outlive their stream's queue: a stream forgotten while idle (no receiver, no block) keeps
them, because a receiver that comes back may re-read offsets whose blocks were queued here (its
Kafka commit after the acknowledgement can fail: a rebalance, a broker away, a kill in between),
and without the marks those records would be queued twice.  They are one integer per partition;
only past a bound of idle streams are the longest-idle stream's marks dropped (:meth:`set_idle`).
"""

from __future__ import annotations

from collections.abc import Iterable

from sluice.block_info import OffsetRange, ReceivedBlockInfo

MarkRow = tuple[int, str, int, int]
"""A snapshot's mark: stream, topic, partition, offset (an array in msgpack, a list read back)."""


class OffsetMarks:
    """The highest ``until_offset`` added per ``(stream, topic, partition)``."""

    def __init__(self) -> None:
        self._high: dict[int, dict[tuple[str, int], int]] = {}
        self._idle: dict[int, None] = {}  # streams forgotten with their marks kept, longest idle first

    def trim(self, info: ReceivedBlockInfo) -> ReceivedBlockInfo | None:
        """``info`` with the offsets already added removed; None when nothing is left."""
        if not info.offset_ranges:
            return info
        marks = self._high.get(info.stream_id, {})
        kept: list[OffsetRange] = []
        removed = 0
        for r in info.offset_ranges:
            high = marks.get((r.topic, r.partition))
            if high is None or r.from_offset >= high:
                kept.append(r)
            elif r.until_offset <= high:
                removed += r.count
            else:
                kept.append(OffsetRange(r.topic, r.partition, high, r.until_offset))
                removed += high - r.from_offset
        if len(kept) == len(info.offset_ranges) and not removed:
            return info
        if not kept or all(r.count == 0 for r in kept) and removed:
            return None
        return info.with_ranges(tuple(kept), max(0, info.num_records - removed))

    def add(self, info: ReceivedBlockInfo) -> None:
        """Raise the marks to the ends of the (already trimmed) block's ranges."""
        if not info.offset_ranges:
            return
        self._idle.pop(info.stream_id, None)
        marks = self._high.setdefault(info.stream_id, {})
        for r in info.offset_ranges:
            key = (r.topic, r.partition)
            if r.until_offset > marks.get(key, -1):
                marks[key] = r.until_offset

    def partitions(self, stream_id: int) -> int:
        """How many topic partitions of the stream have a mark."""
        return len(self._high.get(stream_id, ()))

    def new_partitions(self, info: ReceivedBlockInfo) -> int:
        """How many of the block's topic partitions have no mark yet."""
        marks = self._high.get(info.stream_id, {})
        return len({(r.topic, r.partition) for r in info.offset_ranges if (r.topic, r.partition) not in marks})

    def set_idle(self, stream_id: int, keep: int) -> list[int]:
        """The stream's queue is gone; its marks stay while at most ``keep`` idle streams keep theirs.
        Returns the streams whose marks were dropped to hold that bound (longest idle first)."""
        self._idle.pop(stream_id, None)
        if stream_id in self._high:
            self._idle[stream_id] = None
        dropped = []
        while len(self._idle) > keep:
            oldest = next(iter(self._idle))
            del self._idle[oldest]
            self._high.pop(oldest, None)
            dropped.append(oldest)
        return dropped

    def snapshot(self) -> list[MarkRow]:
        return [(s, topic, p, off) for s, marks in self._high.items() for (topic, p), off in marks.items()]

    def restore(self, marks: Iterable[MarkRow]) -> None:
        self._high = {}
        for s, topic, p, off in marks:
            self._high.setdefault(int(s), {})[(topic, int(p))] = int(off)
