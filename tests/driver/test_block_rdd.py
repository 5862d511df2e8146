"""Block RDDs: one partition per block, read in the task, trimmed ranges respected; grouped when
a batch has many small blocks, sliced when it has fewer than its cores and a large one."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.block_columns import BlockColumns, RangeRow
from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.records import Record
from sluice.spark_driver.block_rdd import MIN_SLICE_RECORDS, block_rdd, read_block_records, slice_plan
from sluice.storage.block_store import Block, FileBlockStore


def _kafka_block(store: FileBlockStore, block_id: str, topic: str, partition: int, offsets: range) -> ReceivedBlockInfo:
    records = [Record(None, f"{partition}:{o}".encode(), topic, partition, o, 0) for o in offsets]
    ranges = (OffsetRange(topic, partition, offsets.start, offsets.stop),)
    location = store.write(Block(0, block_id, records, ranges))
    return ReceivedBlockInfo(0, block_id, "r", len(records), location, ranges)


def rows(info: ReceivedBlockInfo) -> tuple[RangeRow, ...]:
    """The block's ranges as a block ref holds them."""
    return BlockColumns([info]).range_rows()[0]


def test_trimmed_ranges_skip_records_already_counted(tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path)
    info = _kafka_block(store, "b1", "t", 0, range(0, 10))
    assert len(list(read_block_records((None, info.location, rows(info), "b1")))) == 10
    trimmed = info.with_ranges((OffsetRange("t", 0, 6, 10),), 4)
    refs = (store.url, trimmed.location, rows(trimmed), "b1")
    assert [r.offset for r in read_block_records(refs)] == [6, 7, 8, 9]


def test_plain_value_blocks_have_no_ranges(tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path)
    location = store.write(Block(1, "g1", ["a", "b"]))
    assert list(read_block_records((None, location, (), "g1"))) == ["a", "b"]


@pytest.mark.spark
def test_one_partition_per_block(spark, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path)
    blocks = [_kafka_block(store, f"b{p}", "t", p, range(0, 5)) for p in range(3)]
    rdd = block_rdd(spark.sparkContext, blocks)
    assert rdd.getNumPartitions() == 3
    assert rdd.glom().map(len).collect() == [5, 5, 5]
    assert block_rdd(spark.sparkContext, []).count() == 0


@pytest.mark.spark
def test_blocks_grouped_into_fewer_partitions_keep_their_order(spark, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path)
    blocks = [_kafka_block(store, f"b{p}", "t", p, range(0, 5)) for p in range(5)]
    rdd = block_rdd(spark.sparkContext, blocks, max_partitions=2)
    assert rdd.getNumPartitions() == 2
    assert [[(r.partition, r.offset) for r in part] for part in rdd.glom().collect()] == [
        [(p, o) for p in (0, 1) for o in range(5)],
        [(p, o) for p in (2, 3, 4) for o in range(5)],
    ]
    assert block_rdd(spark.sparkContext, blocks[:1], max_partitions=2).getNumPartitions() == 1


def test_a_batch_with_fewer_blocks_than_cores_has_its_large_blocks_sliced() -> None:
    assert slice_plan([30_000], 2) == [(0, 0, 15_000), (0, 15_000, 30_000)]
    assert slice_plan([60_000, 100], 8) == [(0, j * 7_500, (j + 1) * 7_500) for j in range(8)] + [(1, 0, 100)]


def test_no_slice_is_smaller_than_the_minimum_and_enough_blocks_are_never_sliced() -> None:
    assert slice_plan([2 * MIN_SLICE_RECORDS - 1], 8) is None  # two slices would be under the minimum
    assert slice_plan([3 * MIN_SLICE_RECORDS], 8) == [
        (0, j * MIN_SLICE_RECORDS, (j + 1) * MIN_SLICE_RECORDS) for j in range(3)
    ]
    assert slice_plan([100_000, 100_000], 2) is None  # as many blocks as partitions wanted
    assert slice_plan([100_000], 1) is None
    assert slice_plan([], 4) is None


def test_slices_cover_every_position_of_their_block_once() -> None:
    for sizes, parts in (([12_345, 99_999, 0, 5_000], 16), ([1_000_003], 7), ([10_000, 10_001], 3)):
        plan = slice_plan(sizes, parts)
        assert plan is not None
        for i, n in enumerate(sizes):
            spans = [(lo, hi) for b, lo, hi in plan if b == i]
            assert spans[0][0] == 0 and spans[-1][1] == n
            assert all(hi == nxt for (_, hi), (nxt, _) in zip(spans, spans[1:]))
            assert all(hi - lo >= MIN_SLICE_RECORDS for lo, hi in spans) or len(spans) == 1


@pytest.mark.spark
def test_a_large_block_is_read_in_slices_that_hold_each_record_once(spark, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path)
    n = 2 * MIN_SLICE_RECORDS + 10
    big = _kafka_block(store, "big", "t", 0, range(0, n))
    small = _kafka_block(store, "small", "t", 1, range(0, 5))
    rdd = block_rdd(spark.sparkContext, [big, small], min_partitions=4)
    assert rdd.getNumPartitions() == 3  # the large block in two, the small one whole
    parts = rdd.glom().map(lambda part: [(r.partition, r.offset) for r in part]).collect()
    assert parts == [[(0, o) for o in range(n // 2)], [(0, o) for o in range(n // 2, n)], [(1, o) for o in range(5)]]
    assert block_rdd(spark.sparkContext, [big, small], min_partitions=2).getNumPartitions() == 2  # enough blocks
    assert block_rdd(spark.sparkContext, [big], min_partitions=4, max_partitions=1).getNumPartitions() == 1


@pytest.mark.spark
def test_a_sliced_block_whose_ranges_were_trimmed_keeps_only_its_recorded_records(spark, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path)
    n = 4 * MIN_SLICE_RECORDS
    trimmed = _kafka_block(store, "b", "t", 0, range(0, n)).with_ranges((OffsetRange("t", 0, 7, n),), n - 7)
    rdd = block_rdd(spark.sparkContext, [trimmed], min_partitions=4)
    assert rdd.getNumPartitions() > 1
    assert sorted(r.offset for r in rdd.collect()) == list(range(7, n))


@pytest.mark.spark
def test_a_block_holding_more_records_than_reported_loses_none_when_sliced(spark, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path)
    n = 3 * MIN_SLICE_RECORDS
    info = _kafka_block(store, "b", "t", 0, range(0, n))
    under = ReceivedBlockInfo(0, "b", "r", 2 * MIN_SLICE_RECORDS, info.location, info.offset_ranges)
    rdd = block_rdd(spark.sparkContext, [under], min_partitions=2)
    assert rdd.getNumPartitions() == 2
    assert sorted(r.offset for r in rdd.collect()) == list(range(n))
