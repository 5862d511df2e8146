"""Direct mode's range reader against the real broker, on records aiokafka's consumer refuses.

A header key that is not UTF-8 (brokers keep it, Java clients read it) comes through as bytes,
the records around it too.  A record whose headers pass the decoder's budget (80,000 empty ones:
a broker takes it, Sluice's decoder refuses it) goes by ``driver.bad_records``: ``fail`` names its
topic, partition and offset; ``skip`` leaves it out with one log line for the range;
``dead-letter`` keeps it byte for byte in the range's dead-letter file.  Under ``read_committed``
an aborted transaction's records are left out, as Kafka's consumer leaves them out.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange
from sluice.kafka.bad_records import BadRecordError, BadRecordPolicy
from sluice.spark_driver.direct.reader import ConsumerCache, read_range
from sluice.storage.block_store import FileBlockStore
from sluice.storage.dead_letters import BadRecordHandling
from sluice.testing.record_batches import batch, produce_batch, record

pytestmark = pytest.mark.kafka

ODD_KEY = record(1, b"odd", headers=[(b"\xff\xfe", b"x"), (b"trace", b"t")])
FLOOD = record(2, b"flood", headers=[(b"", None)] * 80_000)


@pytest.fixture(scope="module")
def hostile_topic(kafka_broker) -> str:
    """Offsets 0-3 of partition 0: a plain record, one with a header key that is not UTF-8, a header
    flood, a plain record."""
    topic = kafka_broker.create_topic(partitions=1)
    data = batch(0, [record(0, b"first"), ODD_KEY, FLOOD, record(3, b"last")])
    asyncio.run(produce_batch(kafka_broker.bootstrap, topic, 0, data, 4))
    return topic


@pytest.fixture
def cache():
    cache = ConsumerCache()
    yield cache
    cache.close()


def test_a_header_key_that_is_not_utf8_is_read_as_bytes(kafka_broker, hostile_topic, cache) -> None:
    found = list(read_range(kafka_broker.bootstrap, OffsetRange(hostile_topic, 0, 0, 2), cache=cache))
    assert [r.value for r in found] == [b"first", b"odd"]
    assert found[1].headers == ((b"\xff\xfe", b"x"), ("trace", b"t"))


def test_fail_names_the_record(kafka_broker, hostile_topic, cache) -> None:
    with pytest.raises(BadRecordError, match=rf"Kafka record {hostile_topic}/0 offset 2 cannot be decoded"):
        list(read_range(kafka_broker.bootstrap, OffsetRange(hostile_topic, 0, 0, 4), cache=cache))


def test_skip_leaves_it_out_with_one_line(kafka_broker, hostile_topic, cache, caplog) -> None:
    skip = BadRecordHandling(BadRecordPolicy.SKIP)
    with caplog.at_level(logging.WARNING, "sluice.storage.dead_letters"):
        found = read_range(kafka_broker.bootstrap, OffsetRange(hostile_topic, 0, 0, 4), cache=cache, bad_records=skip)
        assert [r.offset for r in found] == [0, 1, 3]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and f"{hostile_topic}/0 offset 2" in lines[0], lines


def test_dead_letter_keeps_it_byte_for_byte(kafka_broker, hostile_topic, cache, tmp_path: Path) -> None:
    dead = FileBlockStore(tmp_path / "dead")
    keep = BadRecordHandling(BadRecordPolicy.DEAD_LETTER, dead.url)
    r = OffsetRange(hostile_topic, 0, 1, 4)
    found = read_range(kafka_broker.bootstrap, r, cache=cache, bad_records=keep, stream_id=3)
    assert [rec.value for rec in found] == [b"odd", b"last"]
    (kept,) = dead.read(dead.location_of(3, f"direct-{hostile_topic}-0-1-4")).records
    assert (kept["topic"], kept["partition"], kept["offset"], kept["raw"]) == (hostile_topic, 0, 2, FLOOD)


def test_read_committed_leaves_an_aborted_transaction_out(kafka_broker, cache) -> None:
    from aiokafka import AIOKafkaProducer

    topic = kafka_broker.create_topic(partitions=1)

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, transactional_id=f"{topic}-tx")
        await producer.start()
        try:
            for values, commit in (([b"a", b"b"], True), ([b"aborted"], False), ([b"c"], True)):
                await producer.begin_transaction()
                for value in values:
                    await producer.send_and_wait(topic, value, partition=0)
                await (producer.commit_transaction() if commit else producer.abort_transaction())
        finally:
            await producer.stop()

    asyncio.run(produce())
    whole = OffsetRange(topic, 0, 0, 7)  # a, b, commit, aborted, abort, c, commit
    committed = read_range(
        kafka_broker.bootstrap, whole, cache=cache, client_options={"isolation_level": "read_committed"}
    )
    assert [r.value for r in committed] == [b"a", b"b", b"c"]
    assert [r.value for r in read_range(kafka_broker.bootstrap, whole, cache=cache)] == [b"a", b"b", b"aborted", b"c"]


def test_the_driver_setting_reaches_direct_mode(tmp_path: Path) -> None:
    from sluice.config import resolve
    from sluice.errors import InvalidArgument
    from sluice.spark_driver.cli import SECTIONS, build_source

    flags = {"driver.source": "direct-kafka", "driver.bad_records": "dead-letter"}
    with pytest.raises(InvalidArgument, match="driver.bad_records = dead-letter needs driver.dead_letter"):
        build_source(resolve(SECTIONS, flags), None)
    source = build_source(resolve(SECTIONS, {**flags, "driver.dead_letter": FileBlockStore(tmp_path).url}), None)
    assert (source._bad.policy, source._bad.dead_letter) == (BadRecordPolicy.DEAD_LETTER, FileBlockStore(tmp_path).url)


@pytest.mark.slow
@pytest.mark.spark
def test_a_skipped_record_is_counted_when_its_batch_completes(kafka_broker, hostile_topic, make_source) -> None:
    from sluice.spark_driver.metrics import BAD_RECORDS

    from .conftest import complete

    before = BAD_RECORDS.labels("skip")._value.get()
    source = make_source(hostile_topic, group_id=f"g-skip-{hostile_topic}", auto_offset_reset="earliest")
    source._bad = type(source._bad)("skip")  # driver.bad_records = skip, as the driver's configuration gives it
    records = complete(source, source.create_batch(1000, 10.0))
    assert [r.value for r in records] == [b"first", b"odd", b"last"]
    assert BAD_RECORDS.labels("skip")._value.get() - before == 1


def test_the_drivers_offsets_checks_read_past_the_hostile_records(kafka_broker, hostile_topic) -> None:
    """The end-offset probe and the time search fetch records too (aiokafka's consumer refused them)."""
    from sluice.kafka.offsets_client import KafkaOffsets

    kafka = KafkaOffsets(kafka_broker.bootstrap, [hostile_topic], None)
    kafka.start()
    try:
        assert kafka.latest_offsets() == {(hostile_topic, 0): 4}
        assert kafka.offsets_for_times({(hostile_topic, 0): 1_000}) == {(hostile_topic, 0): 0}
    finally:
        kafka.close()
