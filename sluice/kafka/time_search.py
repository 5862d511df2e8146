"""The first offset of a partition whose record is at or after a time, checked against the records.

Kafka's ListOffsets by timestamp promises that the offset it returns holds the first record that
late.  A broker that breaks it (the tansu test broker answers offset 0 whatever the time) would
start a query at the wrong place, so the answer is checked by reading the record there and the one
before, and replaced by a binary search over records when it is wrong.  The search assumes times
grow with offsets, as Kafka's own time index does.  Pure apart from ``record_at``, which reads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

RecordAt = Callable[[int], Awaitable[tuple[int, int] | None]]
"""(offset, timestamp ms) of the first record at or after an offset; None when there is none."""


async def first_offset_at(record_at: RecordAt, low: int, end: int, timestamp: int, answer: int) -> int | None:
    """The first offset in ``[low, end)`` whose record's time is at least ``timestamp``: the
    broker's ``answer`` when the record there is that late and the one before it is not, else found
    by binary search (below ``answer`` when its record is that late but the one before cannot be
    seen: an offset with no record, such as a transaction marker); None when no record is that late."""
    high = end
    at = await record_at(answer) if low <= answer < end else None
    if at is not None and at[1] >= timestamp:
        high = at[0]  # the first record that late is this one or an earlier one
        before = await record_at(answer - 1) if low < answer else None
        if before is None or (before[0] < answer and before[1] < timestamp):
            return answer  # confirmed (the record before is not there, or earlier)
    while low < high:  # every record before ``low`` is earlier than ``timestamp``
        middle = (low + high) // 2
        hit = await record_at(middle)
        if hit is None or hit[1] >= timestamp:
            high = middle
        else:
            low = hit[0] + 1
    first = await record_at(low) if low < end else None
    return None if first is None else first[0]
