"""The fault campaign's checker against the campaign's own broker, tansu, which is why these run on
tansu and not on Apache Kafka: tansu lists a partition's end as its last record batch's base
offset plus one, short of the end whenever that batch holds more than one record, and reports no
committed offset for a partition its group committed none in. Apache Kafka does neither, so only
tansu shows that the checker's end offsets are what reading on finds (every record produced is
below one). When the campaign moves to a replicated Apache Kafka cluster, these go with tansu."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.embedded import Broker, start_broker
from sluice.testing.chaos_workload import committed, ends, present

BATCHES, BATCH = 8, 10

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


@pytest.fixture(scope="module")
def tansu() -> Iterator[Broker]:
    """tansu, the broker the fault campaign runs on: the quirks checked here are its own."""
    broker = start_broker()
    yield broker
    broker.stop()


async def produce(bootstrap: str, topic: str) -> dict[int, int]:
    """BATCHES awaited batches of BATCH records over two partitions: the count per partition."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=50)
    await producer.start()
    counts = {0: 0, 1: 0}
    try:
        for b in range(BATCHES):
            sent = [await producer.send(topic, b"%d" % (b * BATCH + i), partition=i % 2) for i in range(BATCH)]
            await asyncio.gather(*sent)
            for i in range(BATCH):
                counts[i % 2] += 1
    finally:
        await producer.stop()
    return counts


async def listed(bootstrap: str, topic: str) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        got = await consumer.end_offsets([TopicPartition(topic, p) for p in range(2)])
    finally:
        await consumer.stop()
    return {tp.partition: end for tp, end in got.items()}


def test_end_offsets_are_past_every_record_although_the_broker_lists_them_short(tansu: Broker, tmp_path: Path) -> None:
    topic = tansu.create_topic(2)
    counts = asyncio.run(produce(tansu.bootstrap, topic))
    short = asyncio.run(listed(tansu.bootstrap, topic))
    assert all(short[p] < counts[p] for p in counts), (short, counts)  # the quirk this reads past
    asyncio.run(ends(tansu.bootstrap, topic, 2, tmp_path / "ends.json", quiet_ms=3000))
    assert {int(p): e for p, e in json.loads((tmp_path / "ends.json").read_text()).items()} == counts


def test_a_groups_committed_offsets_are_read_with_zero_where_it_committed_none(tansu: Broker, tmp_path: Path) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic = tansu.create_topic(2)
    asyncio.run(produce(tansu.bootstrap, topic))

    async def commit() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=tansu.bootstrap, group_id=f"g-{topic}")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            await consumer.commit({TopicPartition(topic, 0): 17})
        finally:
            await consumer.stop()

    asyncio.run(commit())
    asyncio.run(committed(tansu.bootstrap, topic, 2, f"g-{topic}", tmp_path / "c.json"))
    assert json.loads((tmp_path / "c.json").read_text()) == {"0": 17, "1": 0}


def test_the_offsets_asked_about_that_hold_a_record_are_named(tansu: Broker, tmp_path: Path) -> None:
    topic = tansu.create_topic(2)
    asyncio.run(produce(tansu.bootstrap, topic))  # 40 records in each partition
    asyncio.run(present(tansu.bootstrap, topic, {0: [[3, 6], [38, 40]], 1: [[0, 2]]}, tmp_path / "p.json"))
    assert json.loads((tmp_path / "p.json").read_text()) == {"0": [3, 4, 5, 38, 39], "1": [0, 1]}
