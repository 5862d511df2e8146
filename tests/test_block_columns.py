"""BlockColumns: blocks kept as columns are the same blocks, split and joined, and give the block
RDD's refs without building a block object."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.block_columns import BlockColumns
from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.spark_driver.block_rdd import block_refs

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=6)
ranges_ = st.builds(
    lambda t, p, a, n: OffsetRange(t, p, a, a + n), names, st.integers(0, 9), st.integers(0, 2**62), st.integers(0, 100)
)
blocks_ = st.lists(
    st.builds(
        ReceivedBlockInfo,
        st.integers(0, 3),
        names,
        names,
        st.integers(0, 2**40),
        names,
        st.lists(ranges_, max_size=3).map(tuple),
        st.dictionaries(names, st.integers(), max_size=2),
    ),
    max_size=8,
)


def refs_of_objects(blocks: list[ReceivedBlockInfo], url: str) -> list[Any]:
    """What a task needs of each block, read from the block objects."""
    return [(url, b.location, tuple(tuple(r.to_wire()) for r in b.offset_ranges), b.block_id) for b in blocks]


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(blocks_, st.integers(0, 8))
def test_columns_are_their_blocks_split_and_joined_again(blocks: list[ReceivedBlockInfo], k: int) -> None:
    columns = BlockColumns(blocks)
    assert len(columns) == len(blocks) and len(columns.offset_ranges) == sum(len(b.offset_ranges) for b in blocks)
    assert block_refs(columns, "s3://b") == refs_of_objects(blocks, "s3://b")
    assert columns._blocks is None  # counts and refs came from the columns
    assert columns == blocks and list(columns.offset_ranges) == [r for b in blocks for r in b.offset_ranges]
    first = columns.take(k)
    assert first == blocks[:k] and columns == blocks[k:]  # take moves blocks out, the cache goes with them
    assert BlockColumns.joined([first, columns]) == blocks


def test_each_block_built_has_a_metadata_map_of_its_own() -> None:
    columns = BlockColumns([ReceivedBlockInfo(0, f"b{i}", "r", 1, f"file:///b{i}.blk") for i in range(2)])
    columns[0].metadata["x"] = 1
    assert columns[1].metadata == {} and columns.metadata == [None, None]
