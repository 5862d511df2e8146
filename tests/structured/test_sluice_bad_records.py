"""The ``sluice`` source's ``badRecords`` option on a block of record batches holding a record that
cannot be decoded (written by hand: a broker that checks records refuses it), read by the task
side (:func:`rows`) as the source's partitions carry it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.kafka.bad_records import BadRecordError
from sluice.kafka.record_batches import KafkaBatches
from sluice.spark_driver.block_rdd import block_refs
from sluice.spark_driver.structured.options import sluice_options
from sluice.spark_driver.structured.source import BlockPartition, rows
from sluice.storage.block_store import Block, FileBlockStore
from sluice.testing.record_batches import batch, framed, record, record_body

UNDECODABLE = framed(record_body(1, b"bad", header_count=5))


def partition(tmp_path: Path, **options: str) -> BlockPartition:
    store = FileBlockStore(tmp_path / "blocks")
    piece = KafkaBatches("t", 0, memoryview(batch(0, [record(0, b"a"), UNDECODABLE, record(2, b"c")])), 0, 3, 3)
    ranges = (OffsetRange("t", 0, 0, 3),)
    location = store.write(Block(4, "b-1", [piece], ranges))
    (ref,) = block_refs([ReceivedBlockInfo(4, "b-1", "r", 3, location, ranges)])
    return BlockPartition(ref, {}, sluice_options({"tracker": "127.0.0.1:7100", **options}).bad_records)


def test_fail_by_default_names_the_record(tmp_path: Path) -> None:
    with pytest.raises(BadRecordError, match="Kafka record t/0 offset 1 cannot be decoded"):
        list(rows(partition(tmp_path), "value"))


def test_skip_and_dead_letter_leave_it_out(tmp_path: Path, caplog, monkeypatch) -> None:
    with caplog.at_level(logging.WARNING, "sluice.storage.dead_letters"):
        assert list(rows(partition(tmp_path, badRecords="skip"), "value")) == [(b"a",), (b"c",)]
    assert len(caplog.records) == 1 and "t/0 offset 1" in caplog.records[0].getMessage()
    monkeypatch.setenv("SLUICE_STRUCTURED_FILE_DIRS", str(tmp_path))
    dead = FileBlockStore(tmp_path / "dead")
    kept = partition(tmp_path, badRecords="dead-letter", deadLetter=str(tmp_path / "dead"))
    assert list(rows(kept, "value")) == [(b"a",), (b"c",)]
    (entry,) = dead.read(dead.location_of(4, "b-1")).records
    assert (entry["offset"], entry["raw"]) == (1, UNDECODABLE)
