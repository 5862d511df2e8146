"""``format("sluice")`` with the shared SparkSession and a real tracker process.

Blocks are written and reported as a receiver does; the query's sink is Spark's memory sink, and
``processAllAvailable`` waits for the engine (no sleeps).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from sluice.storage.block_store import FileBlockStore
from sluice.tracker.client.sync_client import SyncTrackerClient
from tests.structured.conftest import put_block

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def run_query(spark, tracker: str, checkpoint: Path | None = None, **options):
    name = f"q{uuid.uuid4().hex[:8]}"
    reader = spark.readStream.format("sluice").option("tracker", tracker)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    writer = reader.load().writeStream.format("memory").queryName(name)
    if checkpoint is not None:  # the query's option, not the source's: the source refuses it
        writer = writer.option("checkpointLocation", str(checkpoint))
    return name, writer.start()


def test_blocks_are_read_once_in_order_and_committed_blocks_deleted(registered, tracker, tmp_path: Path) -> None:
    spark = registered
    store = FileBlockStore(tmp_path / "blocks")
    with SyncTrackerClient(tracker.address, "receiver") as client:
        first = [put_block(client, store, [f"a{i}-{j}" for j in range(5)]) for i in range(3)]
        name, query = run_query(spark, tracker.address, tmp_path / "ck", records="value")
        try:
            query.processAllAvailable()
            later = [put_block(client, store, [f"b{i}-{j}" for j in range(5)]) for i in range(2)]
            query.processAllAvailable()
            values = [r.value.decode() for r in spark.sql(f"select value from {name}").collect()]
            assert sorted(values) == sorted(
                [f"a{i}-{j}" for i in range(3) for j in range(5)] + [f"b{i}-{j}" for i in range(2) for j in range(5)]
            )
            assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {"0": 5}
        finally:
            query.stop()
    # commit(end) of the first batch ran when a later one was planned: its blocks left tracker and
    # store; the last batch is committed only when the next is planned, so its blocks stay
    for info in first:
        assert not Path(info.location.removeprefix("file://")).exists()
    assert Path(later[-1].location.removeprefix("file://")).exists()


def test_kafka_records_keep_the_kafka_schema(registered, tracker, tmp_path: Path) -> None:
    from sluice.records import Record

    store = FileBlockStore(tmp_path / "blocks")
    records = [Record(b"k", f"v{i}".encode(), "topic", 0, i, 1_700_000_000_000, (("h", b"%d" % i),)) for i in range(4)]
    with SyncTrackerClient(tracker.address, "receiver") as client:
        put_block(client, store, records)
    name, query = run_query(registered, tracker.address, includeHeaders="true")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = registered.sql(f"select * from {name} order by offset").collect()
    assert registered.table(name).columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert [(r.key, r.value, r.topic, r.partition, r.offset, [tuple(h) for h in r.headers]) for r in rows] == [
        (b"k", f"v{i}".encode(), "topic", 0, i, [("h", b"%d" % i)]) for i in range(4)
    ]


def test_max_offsets_per_trigger_bounds_each_batch(registered, tracker, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path / "blocks")
    with SyncTrackerClient(tracker.address, "receiver") as client:
        for i in range(6):
            put_block(client, store, [f"{i}-{j}" for j in range(10)])
    # the fixed bound alone: admission would also cut a batch after one that overran its trigger,
    # which a loaded machine makes any batch do
    name, query = run_query(registered, tracker.address, records="value", maxOffsetsPerTrigger=25, admission="false")
    try:
        query.processAllAvailable()
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    assert sizes == [20, 20, 20]  # two 10-record blocks fit in 25, a third does not


def test_bad_options_stop_the_query_with_a_clear_error(registered) -> None:
    with pytest.raises(Exception, match="option tracker is missing"):
        registered.readStream.format("sluice").load()
    with pytest.raises(Exception, match="option streams = 'a' is not allowed"):
        registered.readStream.format("sluice").option("tracker", "127.0.0.1:1").option("streams", "a").load()


def test_available_now_drains_what_is_queued_in_bounded_batches_then_stops(registered, tracker, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path / "blocks")
    with SyncTrackerClient(tracker.address, "receiver") as client:
        for i in range(5):
            put_block(client, store, [f"{i}-{j}" for j in range(10)])
    name = f"q{uuid.uuid4().hex[:8]}"
    query = (
        registered.readStream.format("sluice")
        .option("tracker", tracker.address)
        .option("records", "value")
        .option("maxOffsetsPerTrigger", "20")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [20, 20, 10]
    assert registered.sql(f"select count(distinct value) as n from {name}").collect()[0].n == 50
