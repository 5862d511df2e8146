"""``sluice-kafka``'s task side against the real broker, on records aiokafka's consumer refuses: a
range's rows as the data source's ``read`` returns them (:func:`read_rows`), the ``badRecords``
option applied.  The Spark query around it is the one the other ``sluice-kafka`` tests run."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sluice.kafka.bad_records import BadRecordError
from sluice.spark_driver.structured.kafka_options import kafka_options
from sluice.spark_driver.structured.kafka_ranges import range_partitions, read_rows
from sluice.testing.record_batches import batch, produce_batch, record
from tests.direct.test_bad_records import FLOOD, ODD_KEY

pytestmark = pytest.mark.kafka


def rows(bootstrap: str, topic: str, **options: str) -> list[tuple[int, object]]:
    o = kafka_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "includeHeaders": "true", **options})
    (task,) = range_partitions(o, {(topic, 0): 0}, {(topic, 0): 4})
    out = []
    for arrow in read_rows(task):
        out += [(r["offset"], r["headers"]) for r in arrow.to_pylist()]
    return out


def test_badrecords_applies_to_sluice_kafka_and_odd_header_keys_come_through(kafka_broker, caplog) -> None:
    topic = kafka_broker.create_topic(partitions=1)
    data = batch(0, [record(0, b"first"), ODD_KEY, FLOOD, record(3, b"last")])
    asyncio.run(produce_batch(kafka_broker.bootstrap, topic, 0, data, 4))
    with pytest.raises(BadRecordError, match=rf"Kafka record {topic}/0 offset 2 cannot be decoded"):
        rows(kafka_broker.bootstrap, topic)
    with caplog.at_level(logging.WARNING, "sluice.storage.dead_letters"):
        found = rows(kafka_broker.bootstrap, topic, badRecords="skip")
    assert [offset for offset, _ in found] == [0, 1, 3]
    assert found[1][1] == [{"key": "\ufffd\ufffd", "value": b"x"}, {"key": "trace", "value": b"t"}]
    assert [r.getMessage() for r in caplog.records if f"{topic}/0 offset 2" in r.getMessage()] != []
