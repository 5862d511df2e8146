"""Batch: Kafka-schema DataFrame, idempotent sinks, BatchInfo timing and wire form."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange
from sluice.spark_driver.batch import Batch, BatchInfo, record_to_row

# The receivers' Record has this shape; a local stand-in keeps this test independent of them.
Rec = namedtuple("Rec", "key value topic partition offset timestamp_ms")


def test_batch_info_delays_and_wire() -> None:
    info = BatchInfo(1000, 5, submission_time_ms=1010)
    assert info.scheduling_delay_ms is None and info.processing_delay_ms is None and info.total_delay_ms is None
    info = info.with_(
        processing_start_ms=1500, processing_end_ms=2700, status="succeeded", stream_records={0: 3, 1: 2}, attempts=1
    )
    assert (info.scheduling_delay_ms, info.processing_delay_ms, info.total_delay_ms) == (490, 1200, 1690)
    wire = info.to_wire()
    assert wire["batch_time_ms"] == 1000 and wire["processing_end_ms"] == 2700
    assert wire["stream_records"] == {"0": 3, "1": 2} and wire["status"] == "succeeded"
    assert info.for_stream(1).num_records == 2 and info.for_stream(7).num_records == 0


def test_record_to_row_kafka_and_plain() -> None:
    row = record_to_row(Rec(b"k", b"v", "t", 2, 42, 1_700_000_000_000))
    assert row[:5] == (b"k", b"v", "t", 2, 42) and row[5].year == 2023 and row[6] == 0
    assert record_to_row("hello") == (None, b"hello", None, None, None, None, None)
    assert record_to_row(17)[1] == b"17"


@pytest.mark.spark
def test_to_df_has_kafka_schema(spark) -> None:
    rdd = spark.sparkContext.parallelize([Rec(None, b"a", "t", 0, 1, 0), Rec(b"k", b"b", "t", 1, 7, 5)], 2)
    batch = Batch(1000, rdd, spark, num_records=2, offset_ranges=(OffsetRange("t", 0, 1, 2),))
    df = batch.to_df()
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert dict(df.dtypes)["value"] == "binary" and dict(df.dtypes)["offset"] == "bigint"
    assert sorted(bytes(r.value) for r in df.collect()) == [b"a", b"b"]
    assert batch.batch_id == 1000


@pytest.mark.spark
def test_write_json_replaces_a_rerun(spark, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    first = Batch(2000, spark.sparkContext.parallelize(["1", "2", "3"], 2), spark, num_records=3)
    final = first.write_json(out)
    assert final.endswith("batch_time=2000")
    # The same batch re-run (after a restart) with the same input: replaced, never duplicated.
    first.write_json(out)
    other = Batch(3000, spark.sparkContext.parallelize(["4"], 1), spark, num_records=1)
    other.write_json(out)
    values = sorted(r.value for r in spark.read.json(out).collect())
    assert values == ["1", "2", "3", "4"]
    assert sorted(p.name for p in Path(out).iterdir() if not p.name.startswith(".")) == [
        "batch_time=2000",
        "batch_time=3000",
    ]
    # A stale temp dir of a run that died before its rename is removed by the next write.
    stale = Path(out) / "_tmp_batch_time=2000_dead"
    stale.mkdir()
    first.write_parquet(str(tmp_path / "pq"))
    first.write_json(out)
    assert not stale.exists()
    rows = spark.read.parquet(str(tmp_path / "pq")).collect()
    assert sorted(bytes(r.value) for r in rows) == [b"1", b"2", b"3"] and rows[0].batch_time == 2000
    parts = (Path(out) / "batch_time=2000").glob("part-*")
    rows_json = [json.loads(line) for f in parts for line in f.read_text().splitlines()]
    assert sorted(row["value"] for row in rows_json) == ["1", "2", "3"]


@pytest.mark.spark
def test_empty_batch_writes_nothing_and_runs_no_job(spark, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    empty = Batch(5000, spark.sparkContext.emptyRDD(), spark, num_records=0)
    assert empty.is_empty
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    assert empty.write_json(out) is None and empty.write_parquet(out) is None
    assert not (tmp_path / "out").exists()  # not even a directory holding only _SUCCESS
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs_before
    Batch(6000, spark.sparkContext.parallelize(["9"], 1), spark, num_records=1).write_json(out)
    assert [r.value for r in spark.read.schema("value string").json(out).collect()] == ["9"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["batch_time=6000"]


@pytest.mark.slow
def test_kafka_arrow_batch_is_what_pyspark_makes_of_the_rows() -> None:
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

    from sluice.records import Record
    from sluice.spark_driver.batch import kafka_arrow_batch, kafka_schema

    class Source:
        def name(self) -> str:
            return "sluice-kafka"

    stamps = (1_795_778_860_123, -1, None, 0)
    records = [
        Record(
            None if i % 3 else str(i).encode(),
            f"v{i}".encode(),
            "t",
            2,
            40 + i,
            stamps[i % 4],
            (("h", b"x"), ("n", None)) if i % 2 else (),
        )
        for i in range(12)
    ]
    for headers in (False, True):
        rows = iter([record_to_row(r, headers) for r in records])
        expected = list(records_to_arrow_batches(rows, 100, kafka_schema(headers), Source()))  # type: ignore[arg-type]
        got = kafka_arrow_batch(records, headers)
        assert len(expected) == 1 and got.schema.equals(expected[0].schema) and got.equals(expected[0])
    # one empty range's chunk never reaches it, but an empty list is still a valid batch
    assert kafka_arrow_batch([]).num_rows == 0


def test_a_batch_of_empty_ranges_is_empty() -> None:
    idle = Batch(1000, None, None, num_records=0, offset_ranges=(OffsetRange("t", 0, 5, 5), OffsetRange("t", 1, 0, 0)))
    assert idle.is_empty
    assert not Batch(1000, None, None, num_records=0, offset_ranges=(OffsetRange("t", 0, 5, 6),)).is_empty
