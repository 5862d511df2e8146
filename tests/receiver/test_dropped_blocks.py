"""A block the tracker drops as a duplicate leaves no file behind: nothing else knows it, so no
batch reads it and no driver cleanup ever deletes it (a fault campaign found such files in the
store long past retention, one per dropped block).  Its offsets are committed: the tracker holds
them, and a receiver that re-read them after a failed commit must move on (a thirty-minute fault
campaign found receivers sent back to the same offset by every rebalance, the stream falling
further behind while every block they cut was a duplicate)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from sluice.embedded import create_topic
from sluice.receiver.sources.kafka import KafkaReceiver
from sluice.tracker.client.tracker_client import TrackerClient
from tests.polling import eventually

from .helpers import allocate_all, records_of
from .test_kafka_receiver import make_supervisor, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


async def test_a_block_the_tracker_drops_as_a_duplicate_is_deleted_from_the_store(
    kafka_broker, tracker_process, tmp_path
):
    topic = await create_topic(kafka_broker.bootstrap, 1)
    await produce(kafka_broker.bootstrap, topic, 1_000, 1)
    async with TrackerClient(tracker_process.address, "receiver") as client:
        for name in ("k-1", "k-2"):  # a second group reads the same offsets: each of its blocks is a duplicate
            receiver = KafkaReceiver(kafka_broker.bootstrap, topic, f"{name}-{topic}")
            sup = make_supervisor(receiver, client, tmp_path, name)
            await sup.start()
            await eventually(lambda s=sup, r=receiver: s.pusher.records_stored == 1_000 and r.lag() == 0, timeout=60)
            await sup.stop()
    blocks = await allocate_all(tracker_process.address)
    assert sorted(int(r.value) for r in records_of(blocks)) == list(range(1_000))
    assert {info.receiver_id for info in blocks} == {"k-1"}
    files = {path.name for path in (tmp_path / "blocks").rglob("*.blk")}
    assert files == {Path(urlsplit(info.location).path).name for info in blocks}
    assert await committed(kafka_broker.bootstrap, topic, f"k-2-{topic}") == 1_000  # every block dropped


async def committed(bootstrap: str, topic: str, group: str) -> int | None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return await consumer.committed(TopicPartition(topic, 0))
    finally:
        await consumer.stop()
