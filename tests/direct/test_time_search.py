"""The offset for a start time, checked against the records: the broker's answer when the records
confirm it, a binary search over them when they do not (tansu answers 0 whatever the time)."""

from __future__ import annotations

import asyncio

import pytest

from sluice.kafka.time_search import first_offset_at

# offset -> timestamp, with a gap (a compacted or transactional marker offset) at 4
RECORDS = {0: 100, 1: 100, 2: 200, 3: 300, 5: 300, 6: 400, 7: 500}
END = 8


def search(timestamp: int, answer: int) -> tuple[int | None, list[int]]:
    reads: list[int] = []

    async def record_at(offset: int) -> tuple[int, int] | None:
        reads.append(offset)
        later = [o for o in RECORDS if o >= offset]
        return (min(later), RECORDS[min(later)]) if later else None

    return asyncio.run(first_offset_at(record_at, 0, END, timestamp, answer)), reads


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [(50, 0), (100, 0), (150, 2), (300, 3), (350, 6), (500, 7), (501, None)],
)
def test_a_wrong_answer_is_replaced_by_the_first_record_that_late(timestamp: int, expected: int | None) -> None:
    assert search(timestamp, 0 if expected != 0 else 7)[0] == expected


def test_a_right_answer_costs_two_reads() -> None:
    found, reads = search(300, 3)
    assert found == 3 and reads == [3, 2]
    found, reads = search(400, 6)  # the record before 6 is 5, at 300
    assert found == 6 and len(reads) == 2


def test_an_answer_past_the_gap_is_checked_against_the_record_before_it() -> None:
    assert search(300, 5)[0] == 3  # 5 is at 300 but so is 3, before it
