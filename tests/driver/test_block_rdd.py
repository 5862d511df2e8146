"""Block RDDs: one partition per block, read in the task, trimmed ranges respected."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.block_columns import BlockColumns, RangeRow
from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.records import Record
from sluice.spark_driver.block_rdd import block_rdd, read_block_records
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
