"""``OffsetMarks``: per stream and topic partition, the highest source offset already added.

This is what makes each source record enter exactly one block: a receiver that restarted and
re-read offsets sends blocks that overlap what was already added.  A block entirely below the mark
is dropped; a block overlapping it is recorded with its ranges trimmed, so the driver skips the
records before the trimmed start.  The marks outlive a stream's queue and are part of every
snapshot.
"""

from __future__ import annotations

from typing import Any

from sluice.block_info import OffsetRange, ReceivedBlockInfo


class OffsetMarks:
    """The highest ``until_offset`` added per ``(stream, topic, partition)``."""

    def __init__(self) -> None:
        self._high: dict[tuple[int, str, int], int] = {}

    def trim(self, info: ReceivedBlockInfo) -> ReceivedBlockInfo | None:
        """``info`` with the offsets already added removed; None when nothing is left."""
        if not info.offset_ranges:
            return info
        kept: list[OffsetRange] = []
        removed = 0
        for r in info.offset_ranges:
            high = self._high.get((info.stream_id, r.topic, r.partition))
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
        for r in info.offset_ranges:
            key = (info.stream_id, r.topic, r.partition)
            if r.until_offset > self._high.get(key, -1):
                self._high[key] = r.until_offset

    def snapshot(self) -> list[list[Any]]:
        return [[s, topic, p, off] for (s, topic, p), off in self._high.items()]

    def restore(self, marks: list[list[Any]]) -> None:
        self._high = {(int(s), topic, int(p)): int(off) for s, topic, p, off in marks}
