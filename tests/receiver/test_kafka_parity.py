"""The Kafka receiver against Apache Kafka: ``kafka.topic_pattern`` picking up a topic
created while it runs, ``kafka.fail_on_data_loss`` stopping it at a lost position, and headers
kept in the blocks it stores."""

from __future__ import annotations

import logging
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from sluice.embedded import create_topic
from sluice.receiver.sources.kafka import KafkaReceiver
from sluice.tracker.client.tracker_client import TrackerClient
from tests.polling import eventually

from .helpers import allocate_all, past_the_log, records_of
from .test_kafka_receiver import make_supervisor, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


async def test_a_topic_pattern_picks_up_a_topic_created_while_running(kafka_broker, tracker_process, tmp_path):
    prefix = f"rp{uuid.uuid4().hex[:6]}"
    first = await create_topic(kafka_broker.bootstrap, 1, f"{prefix}-a")
    await produce(kafka_broker.bootstrap, first, 5, 1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    async with TrackerClient(tracker_process.address, "receiver") as client:
        receiver = KafkaReceiver(
            kafka_broker.bootstrap,
            "",
            f"g-{prefix}",
            topic_pattern=f"{prefix}-.*",
            client={"metadata_max_age_ms": 300},  # how often a pattern subscription looks for new topics
        )
        sup = make_supervisor(receiver, client, tmp_path, "k-pat")
        await sup.start()
        await eventually(lambda: sup.pusher.records_stored == 5, timeout=60)
        second = await create_topic(kafka_broker.bootstrap, 1, f"{prefix}-b")
        await producer.start()
        try:
            await producer.send_and_wait(second, b"new", headers=[("h", b"1")])
        finally:
            await producer.stop()
        await eventually(lambda: sup.pusher.records_stored == 6, timeout=60)
        await sup.stop()
    records = records_of(await allocate_all(tracker_process.address))
    assert [(r.topic, r.value, r.headers) for r in records if r.topic == second] == [(second, b"new", (("h", b"1"),))]


async def test_fail_on_data_loss_stops_the_receiver_at_a_lost_position(kafka_broker, tracker_process, tmp_path, caplog):
    """As the reset test beside it: Apache Kafka answers a fetch past the log with OFFSET_OUT_OF_RANGE."""
    topic = await create_topic(kafka_broker.bootstrap, 1)
    await produce(kafka_broker.bootstrap, topic, 30, 1)
    group = f"g-{topic}"
    await past_the_log(kafka_broker.bootstrap, topic, group)
    async with TrackerClient(tracker_process.address, "receiver") as client:
        receiver = KafkaReceiver(kafka_broker.bootstrap, topic, group, fail_on_data_loss=True)
        sup = make_supervisor(receiver, client, tmp_path, "k-loss")
        with caplog.at_level(logging.INFO):
            await sup.start()
            await eventually(receiver.is_stopped, timeout=60)
            await sup.stop()
    assert sup.pusher.records_stored == 0  # not reset to the earliest offset
    assert f"data lost: {topic}/0: offset 10000 is no longer in the log" in caplog.text
