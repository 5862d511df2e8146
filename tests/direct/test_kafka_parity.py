"""Direct mode against the real tansu broker and Spark: ``kafka.topic_pattern`` picking up a topic
created between batches, ``kafka.topic_weights``, ``kafka.limits_count`` on a transactional topic,
``kafka.max_bytes_per_batch``, ``kafka.fail_on_data_loss`` on a deleted topic, and headers in
``Batch.to_df(include_headers=True)``."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sluice.kafka.offsets import DataLossError
from sluice.spark_driver.source import SourceError
from tests.direct.conftest import complete, delete_topic, produce, produce_transactions

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


def test_a_topic_pattern_picks_up_a_topic_created_between_batches(kafka_broker, make_source) -> None:
    bootstrap, prefix = kafka_broker.bootstrap, f"dp{uuid.uuid4().hex[:6]}"
    first = kafka_broker.create_topic(1, f"{prefix}-a")
    produce(bootstrap, first, {0: 2})
    source = make_source("unused", group_id=f"g-{prefix}", topic_pattern=f"{prefix}-.*", auto_offset_reset="earliest")
    values = sorted(r.value.decode() for r in complete(source, source.create_batch(1000, None)))
    assert values == ["v-0-0", "v-0-1"]
    second = kafka_broker.create_topic(1, f"{prefix}-b")
    produce(bootstrap, second, {0: 1}, prefix="new")
    batch = source.create_batch(2000, None)
    assert [(r.topic, r.count) for r in batch.offset_ranges if r.count] == [(second, 1)]  # from its earliest
    assert [r.value for r in complete(source, batch)] == [b"new-0-0"]


def test_topic_weights_share_a_batch_among_topics(kafka_broker, make_source, tmp_path) -> None:
    bootstrap = kafka_broker.bootstrap
    busy, quiet = kafka_broker.create_topic(1), kafka_broker.create_topic(1)
    produce(bootstrap, busy, {0: 300})
    produce(bootstrap, quiet, {0: 200})
    both = f"{busy},{quiet}"
    by_lag = make_source(both, checkpoint_dir=tmp_path / "a", auto_offset_reset="earliest")
    weighted = make_source(
        both,
        checkpoint_dir=tmp_path / "b",
        group_id=f"g-{quiet}",
        auto_offset_reset="earliest",
        options={"kafka": {"topic_weights": {quiet: 3}}},
    )
    for source, expected in ((by_lag, {busy: 60, quiet: 40}), (weighted, {busy: 25, quiet: 75})):
        batch = source.create_batch(1000, 100.0)  # 100 records/s for a one-second batch
        assert {r.topic: r.count for r in batch.offset_ranges} == expected
        assert len(complete(source, batch)) == 100
    with pytest.raises(SourceError, match="kafka.topic_weights names topic 'elsewhere'"):
        make_source(busy, checkpoint_dir=tmp_path / "c", topic_weights={"elsewhere": 2})


def test_limits_count_records_on_a_transactional_topic(kafka_broker, make_source, tmp_path) -> None:
    topic = kafka_broker.create_topic(1)
    produce_transactions(
        kafka_broker.bootstrap, topic, 4, 5
    )  # 20 records over 24 offsets: a commit marker after each 5
    by_offsets = make_source(topic, checkpoint_dir=tmp_path / "a", auto_offset_reset="earliest")
    assert len(complete(by_offsets, by_offsets.create_batch(1000, 10.0))) == 9  # Spark's way: a marker takes one of 10
    counting = make_source(
        topic,
        checkpoint_dir=tmp_path / "b",
        group_id=f"g2-{topic}",
        auto_offset_reset="earliest",
        options={"kafka": {"limits_count": "records"}},
    )
    sizes = [len(complete(counting, counting.create_batch(t, 10.0))) for t in (1000, 2000)]
    assert sizes == [10, 10]
    with pytest.raises(SourceError, match="kafka.limits_count = 'bytes' is not allowed: expected offsets or records"):
        make_source(topic, checkpoint_dir=tmp_path / "c", limits_count="bytes")


def test_max_bytes_per_batch_bounds_a_batch_by_the_records_sizes(kafka_broker, make_source) -> None:
    topic = kafka_broker.create_topic(1)
    produce(kafka_broker.bootstrap, topic, {0: 50}, prefix="x" * 995)  # about 1,000 bytes a record with its key
    source = make_source(topic, auto_offset_reset="earliest", options={"kafka": {"max_bytes_per_batch": 10_240}})
    sizes = [len(complete(source, source.create_batch(t, None))) for t in (1000, 2000)]  # no rate: bytes alone bound
    assert sizes == [10, 10]
    assert len(complete(source, source.create_batch(3000, 4.0))) == 4  # the rate, where it is the smaller bound


def test_fail_on_data_loss_stops_at_a_deleted_topic_or_goes_on(kafka_broker, make_source, tmp_path) -> None:
    bootstrap = kafka_broker.bootstrap
    for fail in (True, False):
        gone, kept = kafka_broker.create_topic(1), kafka_broker.create_topic(1)
        produce(bootstrap, gone, {0: 1})
        produce(bootstrap, kept, {0: 1})
        source = make_source(
            f"{gone},{kept}", checkpoint_dir=tmp_path / str(fail), auto_offset_reset="earliest", fail_on_data_loss=fail
        )
        complete(source, source.create_batch(1000, None))
        delete_topic(bootstrap, gone)
        produce(bootstrap, kept, {0: 1}, prefix="after")
        if fail:
            with pytest.raises(DataLossError, match=rf"data lost: {gone}/0: the partition is gone \(topic deleted\?\)"):
                source.create_batch(2000, None)
        else:
            assert [r.value for r in complete(source, source.create_batch(2000, None))] == [b"after-0-0"]


def test_headers_in_to_df(kafka_broker, make_source) -> None:
    from aiokafka import AIOKafkaProducer

    topic = kafka_broker.create_topic(1)

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"a", headers=[("h", b"1"), ("h", None)])
            await producer.send_and_wait(topic, b"b")
        finally:
            await producer.stop()

    asyncio.run(send())
    source = make_source(topic, auto_offset_reset="earliest")
    batch = source.create_batch(1000, None)
    rows = {r.value: r.headers for r in batch.to_df(include_headers=True).collect()}
    assert [(h.key, h.value) for h in rows[b"a"]] == [("h", b"1"), ("h", None)] and rows[b"b"] is None
    assert "headers" not in batch.to_df().columns
