"""``Batch.write_kafka`` in receiver mode: a batch of stored blocks written to Kafka, its re-run
(a restarted driver rebuilds it from the same blocks) leaving each record once, as it came."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.records import Record
from sluice.spark_driver.batch import Batch
from sluice.spark_driver.block_rdd import block_rdd
from sluice.storage.block_store import Block, FileBlockStore
from tests.direct.test_write_kafka import read_records

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _block(store: FileBlockStore, partition: int, n: int) -> ReceivedBlockInfo:
    records = [
        Record(f"k{i}".encode(), f"{partition}:{i}".encode(), "in", partition, i, 1000 + i, (("h", str(i).encode()),))
        for i in range(n)
    ]
    ranges = (OffsetRange("in", partition, 0, n),)
    location = store.write(Block(0, f"b{partition}", records, ranges))
    return ReceivedBlockInfo(0, f"b{partition}", "r", n, location, ranges)


def test_a_rerun_receiver_batch_leaves_every_record_once_as_it_came(spark, kafka_broker, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path)
    blocks = [_block(store, p, n) for p, n in ((0, 30), (1, 12))]
    out, app = kafka_broker.create_topic(2), f"t{uuid.uuid4().hex[:8]}"
    for _ in range(2):  # the first run, then the re-run of the same allocation
        batch = Batch(2000, block_rdd(spark.sparkContext, blocks), spark, num_records=42, blocks=blocks)
        batch.write_kafka(out, bootstrap_servers=kafka_broker.bootstrap, app=app)
    records = read_records(kafka_broker.bootstrap, out, 2)
    assert sorted(r.value for r in records) == sorted(
        f"{p}:{i}".encode() for p, n in ((0, 30), (1, 12)) for i in range(n)
    )
    for r in records:
        i = r.value.split(b":")[1]
        assert r.key == b"k" + i and list(r.headers) == [("h", i)]
