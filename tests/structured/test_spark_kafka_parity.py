"""``format("sluice-kafka")`` against Spark's own ``format("kafka")`` (``spark-sql-kafka-0-10``, added
to the shared session by the ``spark_kafka`` fixture) on the same Apache Kafka topics: the same
options give the same rows (key, value, topic, partition, offset, timestamp, timestampType,
headers) and, in streams, the same batch boundaries.

Where the two differ on purpose, docs/reference/kafka-options.md says so and why; these tests hold
everything else to Spark's answer rather than to expectations written down here.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest

from sluice.embedded.spark_kafka import use_session_jars

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

FORMATS = ("kafka", "sluice-kafka")


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    """Write each record (``partition``, ``value``; ``key``, ``headers``, ``timestamp`` in ms if given)."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for r in records:
                await producer.send_and_wait(
                    topic,
                    r["value"],
                    key=r.get("key"),
                    partition=r["partition"],
                    headers=r.get("headers"),
                    timestamp_ms=r.get("timestamp"),
                )
        finally:
            await producer.stop()

    asyncio.run(run())


def admin(bootstrap: str, call) -> Any:
    from aiokafka.admin import AIOKafkaAdminClient

    async def run() -> Any:
        client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await client.start()
        try:
            return await call(client)
        finally:
            await client.close()

    return asyncio.run(run())


def reader(spark, fmt: str, bootstrap: str, options: dict[str, Any], *, stream: bool = False):
    if fmt == "kafka":  # Spark finds its source through this thread's class loader (the fixture's may be another's)
        use_session_jars(spark)
    r = (spark.readStream if stream else spark.read).format(fmt).option("kafka.bootstrap.servers", bootstrap)
    for key, value in {"includeHeaders": "true", **options}.items():
        r = r.option(key, str(value))
    return r


def rows(spark, fmt: str, bootstrap: str, **options) -> list[tuple]:
    """Every column of a batch read, sorted by topic, partition and offset (headers as pairs)."""
    found = reader(spark, fmt, bootstrap, options).load().collect()
    return sorted(_plain(r) for r in found)


def _plain(r) -> tuple:
    found = r.asDict().get("headers")
    headers = None if found is None else [(h.key, h.value) for h in found]
    return (r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.timestampType, headers)


def same_rows(spark, bootstrap: str, **options) -> list[tuple]:
    """The batch read's rows, asserted equal between the two sources."""
    spark_rows, sluice_rows = (rows(spark, fmt, bootstrap, **options) for fmt in FORMATS)
    assert untyped(sluice_rows) == untyped(spark_rows), options
    # the one documented difference (kafka-options.md, timestampType): LogAppendTime (1) reads 0
    assert [r[6] for r in sluice_rows] == [0 for _ in spark_rows], options
    return spark_rows


def untyped(found: list[tuple]) -> list[tuple]:
    """Rows without their timestampType."""
    return [r[:6] + r[7:] for r in found]


def both_refuse(spark, bootstrap: str, **options) -> None:
    for fmt in FORMATS:
        with pytest.raises(Exception):  # noqa: B017 - the two sources word it differently
            rows(spark, fmt, bootstrap, **options)


def available_now(spark, fmt: str, bootstrap: str, **options) -> tuple[list[tuple], list[dict]]:
    """A stream run with ``Trigger.AvailableNow``: its rows, and each batch's end offsets."""
    name = f"p{uuid.uuid4().hex[:8]}"
    df = reader(spark, fmt, bootstrap, options, stream=True).load()
    query = df.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    try:
        query.awaitTermination(120)
        assert not query.isActive, f"{fmt}: Trigger.AvailableNow did not finish"
        ends = [json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress if p["numInputRows"]]
        return sorted(_plain(r) for r in spark.sql(f"select * from {name}").collect()), ends
    finally:
        query.stop()


def same_stream(spark, bootstrap: str, **options) -> tuple[list[tuple], list[dict]]:
    spark_run, sluice_run = (available_now(spark, fmt, bootstrap, **options) for fmt in FORMATS)
    assert sluice_run[1] == spark_run[1], f"batch boundaries differ: {options}"
    assert untyped(sluice_run[0]) == untyped(spark_run[0]), options
    return spark_run


@pytest.fixture
def topics(spark_kafka, kafka_broker):
    """Two topics of mixed records: keys and none, headers (repeated, null-valued) and none,
    producer times (CreateTime) on one and the broker's (LogAppendTime) on the other."""
    from aiokafka.admin import NewTopic

    bootstrap = kafka_broker.bootstrap
    prefix = f"par{uuid.uuid4().hex[:6]}"
    created, appended = f"{prefix}-c", f"{prefix}-l"
    kafka_broker.create_topic(3, created)
    admin(
        bootstrap,
        lambda c: c.create_topics(
            [NewTopic(appended, 2, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})]
        ),
    )
    base = int(time.time() * 1000) - 100_000
    records = [
        {
            "partition": i % 3,
            "value": f"v{i}".encode(),
            "key": None if i % 4 == 0 else f"k{i}".encode(),
            "headers": [("trace", b"t"), ("trace", None)] if i % 5 == 0 else None,
            "timestamp": base + i * 1000,
        }
        for i in range(18)
    ]
    produce(bootstrap, created, records)
    produce(bootstrap, appended, [{"partition": i % 2, "value": f"l{i}".encode()} for i in range(6)])
    return prefix, created, appended, base


def test_batch_reads_match_for_every_topic_selection_and_offset_range(spark_kafka, kafka_broker, topics) -> None:
    spark, bootstrap = spark_kafka, kafka_broker.bootstrap
    prefix, created, appended, _ = topics
    everything = same_rows(spark, bootstrap, subscribe=f"{created},{appended}")
    assert len(everything) == 24 and {r[6] for r in everything} == {0, 1}  # both timestamp types compared
    assert any(r[3] is None for r in everything) and any(r[7] for r in everything)
    assert same_rows(spark, bootstrap, subscribePattern=f"{prefix}-.*") == everything
    same_rows(spark, bootstrap, assign=json.dumps({created: [0, 2], appended: [1]}))
    same_rows(
        spark,
        bootstrap,
        subscribe=created,
        startingOffsets=json.dumps({created: {"0": 1, "1": -2, "2": 3}}),
        endingOffsets=json.dumps({created: {"0": 4, "1": 2, "2": -1}}),
    )
    same_rows(spark, bootstrap, subscribe=created, includeHeaders="false")


def test_batch_reads_by_timestamp_match(spark_kafka, kafka_broker, topics) -> None:
    spark, bootstrap = spark_kafka, kafka_broker.bootstrap
    _, created, _, base = topics  # partition p holds base + (p + 3k) s, k = 0..5
    same_rows(spark, bootstrap, subscribe=created, startingTimestamp=base + 6500)
    same_rows(spark, bootstrap, subscribe=created, endingTimestamp=base + 9000)
    same_rows(spark, bootstrap, subscribe=created, startingTimestamp=base + 2000, endingTimestamp=base + 12500)
    same_rows(
        spark,
        bootstrap,
        subscribe=created,
        startingOffsetsByTimestamp=json.dumps({created: {"0": base + 3000, "1": base, "2": base + 8000}}),
        endingOffsetsByTimestamp=json.dumps({created: {"0": base + 12000, "1": base + 90_000, "2": base + 14500}}),
    )
    # partition 0's last record is at base + 15 s: nothing at or after base + 16 s
    same_rows(
        spark,
        bootstrap,
        subscribe=created,
        startingTimestamp=base + 16_000,
        **{"startingOffsetsByTimestampStrategy": "latest"},
    )
    both_refuse(spark, bootstrap, subscribe=created, startingTimestamp=base + 16_000)


def test_fail_on_data_loss_in_batch_reads_matches(spark_kafka, kafka_broker) -> None:
    from aiokafka import TopicPartition
    from aiokafka.admin import RecordsToDelete

    spark, bootstrap = spark_kafka, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(1)
    produce(bootstrap, topic, [{"partition": 0, "value": f"v{i}".encode()} for i in range(6)])
    admin(bootstrap, lambda c: c.delete_records({TopicPartition(topic, 0): RecordsToDelete(3)}))
    start = json.dumps({topic: {"0": 1}})  # before the log's start, 3
    kept = same_rows(spark, bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert [r[2] for r in kept] == [3, 4, 5]
    both_refuse(spark, bootstrap, subscribe=topic, startingOffsets=start)


def test_available_now_streams_cut_the_same_batches(spark_kafka, kafka_broker) -> None:
    """``maxOffsetsPerTrigger`` shared among partitions of uneven lag (Spark's proration, rounded as
    Spark rounds it), from each kind of start; ``latest`` reads nothing that was there before."""
    spark, bootstrap = spark_kafka, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(3)
    lags = {0: 11, 1: 6, 2: 1}
    produce(
        bootstrap, topic, [{"partition": p, "value": f"{p}-{i}".encode()} for p, n in lags.items() for i in range(n)]
    )
    _, ends = same_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=5)
    assert len(ends) > 3  # several batches compared, not one
    same_stream(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 4, "1": -2, "2": -1}}),
        maxOffsetsPerTrigger=3,
    )
    assert same_stream(spark, bootstrap, subscribe=topic, startingOffsets="latest") == ([], [])


def test_a_trigger_floor_under_available_now_leaves_nothing_unread(spark_kafka, kafka_broker) -> None:
    """``minOffsetsPerTrigger`` with ``maxTriggerDelay`` and ``Trigger.AvailableNow``: the batches
    agree while the lag is above the floor; then Spark's source skips the batch, and its run ends
    with the tail unread (a run shorter than the delay never reaches it), while ``sluice-kafka``
    reads everything there at the start (the documented difference, kafka-options.md)."""
    spark, bootstrap = spark_kafka, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(2)
    produce(bootstrap, topic, [{"partition": i % 2, "value": f"v{i}".encode()} for i in range(9)])
    options = {"subscribe": topic, "startingOffsets": "earliest", "minOffsetsPerTrigger": 4}
    options |= {"maxOffsetsPerTrigger": 4, "maxTriggerDelay": "10m"}
    spark_rows, spark_ends = available_now(spark, "kafka", bootstrap, **options)
    sluice_rows, sluice_ends = available_now(spark, "sluice-kafka", bootstrap, **options)
    assert spark_ends == [{topic: {"0": 2, "1": 1}}, {topic: {"0": 4, "1": 3}}]  # 2 left: below the floor
    assert sluice_ends == [*spark_ends, {topic: {"0": 5, "1": 4}}]
    assert len(spark_rows) == 7 and len(sluice_rows) == 9
    assert all(r in untyped(sluice_rows) for r in untyped(spark_rows))
