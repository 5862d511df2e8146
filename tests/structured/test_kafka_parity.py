"""``format("sluice-kafka")`` against the real tansu broker and the shared SparkSession: the Spark
Kafka source options beyond ``subscribe`` and ``startingOffsets`` (headers, topic patterns and
assignments, start by time, bounded batch reads, trigger floors, split partitions, lag metrics,
topic weights, byte bounds, limits counted in records on a transactional topic, group commits,
data loss on a deleted topic)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid

import pytest

from sluice.embedded import wait_until
from sluice.spark_driver.structured.kafka import source_metrics
from tests.direct.conftest import delete_topic, produce_transactions

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


def send(bootstrap: str, topic: str, values: list[str], *, partition: int = 0, headers=None, timestamps=None) -> None:
    """Write ``values`` to one partition, each with ``headers`` and its timestamp (epoch ms) if given."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i, value in enumerate(values):
                await producer.send_and_wait(
                    topic,
                    value.encode(),
                    partition=partition,
                    headers=headers,
                    timestamp_ms=None if timestamps is None else timestamps[i],
                )
        finally:
            await producer.stop()

    asyncio.run(run())


def stream(spark, bootstrap: str, **options):
    name = f"k{uuid.uuid4().hex[:8]}"
    reader = spark.readStream.format("sluice-kafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return name, reader.load().writeStream.format("memory").queryName(name)


def values(spark, name: str) -> list[str]:
    return sorted(r.value.decode() for r in spark.sql(f"select value from {name}").collect())


def batch(spark, bootstrap: str, **options):
    reader = spark.read.format("sluice-kafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_headers_come_through_in_sparks_schema(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(1)
    send(bootstrap, topic, ["a"], headers=[("trace", b"t-1"), ("trace", b"t-2"), ("empty", None)])
    send(bootstrap, topic, ["b"])
    df = batch(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    got = {r.value.decode(): r.headers for r in df.collect()}
    assert [(h.key, h.value) for h in got["a"]] == [("trace", b"t-1"), ("trace", b"t-2"), ("empty", None)]
    assert got["b"] is None  # as Spark: no headers is null
    assert "headers" not in batch(spark, bootstrap, subscribe=topic).columns  # includeHeaders defaults to false

    name, writer = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", includeHeaders="true")
    query = writer.start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.sql(f"select value, headers from {name} where value = 'a'").collect()
    assert [h.key for h in rows[0].headers] == ["trace", "trace", "empty"]


def test_subscribe_pattern_picks_up_a_topic_created_mid_query(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first = kafka_broker.create_topic(1, f"{prefix}-a")
    kafka_broker.create_topic(1, f"other{prefix}-x")  # does not match the whole pattern
    send(bootstrap, first, ["a0"])
    send(bootstrap, f"other{prefix}-x", ["x0"])
    name, writer = stream(spark, bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    query = writer.trigger(processingTime="200 milliseconds").start()
    try:
        wait_until(lambda: values(spark, name) == ["a0"], "the first topic's record", 60)
        second = kafka_broker.create_topic(2, f"{prefix}-b")
        send(bootstrap, second, ["b0"], partition=1)  # new partitions start at their earliest
        wait_until(lambda: values(spark, name) == ["a0", "b0"], "the new topic's record", 60)
    finally:
        query.stop()


def test_assign_reads_only_the_listed_partitions(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(3)
    for p in range(3):
        send(bootstrap, topic, [f"p{p}"], partition=p)
    df = batch(spark, bootstrap, assign=json.dumps({topic: [0, 2]}))
    assert sorted(r.value.decode() for r in df.collect()) == ["p0", "p2"]


def test_starting_by_timestamp_and_its_strategy(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(2)
    base = int(time.time() * 1000) - 100_000
    send(bootstrap, topic, [f"a{i}" for i in range(6)], partition=0, timestamps=[base + i * 1000 for i in range(6)])
    send(bootstrap, topic, ["b0", "b1"], partition=1, timestamps=[base, base + 1000])
    got = batch(
        spark, bootstrap, subscribe=topic, startingTimestamp=base + 3500, startingOffsetsByTimestampStrategy="latest"
    )
    assert sorted(r.value.decode() for r in got.collect()) == ["a4", "a5"]  # partition 1 has nothing that late
    with pytest.raises(Exception, match=r"option startingTimestamp: no record at or after the timestamp in .*/1"):
        batch(spark, bootstrap, subscribe=topic, startingTimestamp=base + 3500).collect()
    by_partition = json.dumps({topic: {"0": base + 5000, "1": base + 1000}})
    got = batch(spark, bootstrap, subscribe=topic, startingOffsetsByTimestamp=by_partition)
    assert sorted(r.value.decode() for r in got.collect()) == ["a5", "b1"]
    name, writer = stream(
        spark, bootstrap, subscribe=topic, startingTimestamp=base + 4000, startingOffsetsByTimestampStrategy="latest"
    )
    query = writer.start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert values(spark, name) == ["a4", "a5"]


def test_a_bounded_read_is_fixed_when_planned_while_the_topic_grows(registered, kafka_broker) -> None:
    """Records keep arriving while the job runs; its tasks (partition 1's range cut in four, run one
    after the other on two cores) read exactly the ranges planned, so together they give an
    unbroken prefix of each partition, and the explicit end of partition 0 is kept."""
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(2)
    send(bootstrap, topic, [f"a{i}" for i in range(10)], partition=0)
    send(bootstrap, topic, [f"b{i}" for i in range(10)], partition=1)
    df = batch(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 2, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 7, "1": -1}}),
        minPartitions=5,
    )
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            send(bootstrap, topic, [f"late{i}"], partition=i % 2)
            i += 1

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        found = sorted((r.partition, r.offset) for r in df.collect())  # planned here, while the writer writes
        send(bootstrap, topic, ["after"], partition=1)
    finally:
        stop.set()
        writer.join(30)
    ones = [o for p, o in found if p == 1]
    assert [o for p, o in found if p == 0] == list(range(2, 7))
    assert ones == list(range(len(ones))) and len(ones) >= 10  # every record once, none past the planned end
    # planned after the writes: exactly what the JSON names
    exact = batch(spark, bootstrap, subscribe=topic, endingOffsets=json.dumps({topic: {"0": 3, "1": 1}}))
    assert sorted(r.value.decode() for r in exact.collect()) == ["a0", "a1", "a2", "b0"]
    with pytest.raises(Exception, match="option minPartitions = '0' is not allowed"):
        stream(spark, bootstrap, subscribe=topic, minPartitions=0)  # refused at load(), before any query


def test_min_offsets_per_trigger_waits_then_max_trigger_delay_fires(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(1)
    name, writer = stream(spark, bootstrap, subscribe=topic, minOffsetsPerTrigger=5, maxTriggerDelay="1h")
    query = writer.trigger(processingTime="100 milliseconds").start()
    try:
        query.processAllAvailable()
        send(bootstrap, topic, ["a0", "a1", "a2"])
        query.processAllAvailable()  # the source holds the 3 records back: not enough, no delay yet
        assert values(spark, name) == []
        send(bootstrap, topic, ["a3", "a4"])
        # the memory sink shows a batch's rows before the query records its progress: wait for both
        wait_until(
            lambda: len(values(spark, name)) == 5 and any(p["numInputRows"] for p in query.recentProgress),
            "the batch of 5 and its progress",
            60,
        )
        assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [5]
    finally:
        query.stop()

    name, writer = stream(spark, bootstrap, subscribe=topic, minOffsetsPerTrigger=100, maxTriggerDelay="2s")
    query = writer.trigger(processingTime="100 milliseconds").start()
    started = time.monotonic()
    try:
        query.processAllAvailable()
        send(bootstrap, topic, ["late"])
        wait_until(lambda: values(spark, name) == ["late"], "the delayed batch", 60)
        assert time.monotonic() - started >= 2.0  # held back until maxTriggerDelay passed
    finally:
        query.stop()


def test_min_partitions_split_a_hot_partition_and_read_each_record_once(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(2)
    send(bootstrap, topic, [f"hot{i}" for i in range(40)], partition=0)
    send(bootstrap, topic, ["cold"], partition=1)
    df = batch(spark, bootstrap, subscribe=topic, minPartitions=5)
    assert df.rdd.getNumPartitions() == 5  # 41 records / 5: the hot range in 4 parts, the cold one whole
    offsets = sorted((r.partition, r.offset) for r in df.collect())
    assert offsets == [(0, o) for o in range(40)] + [(1, 0)]
    capped = batch(spark, bootstrap, subscribe=topic, maxRecordsPerPartition=15)
    assert capped.rdd.getNumPartitions() == 4 and capped.count() == 41


@pytest.mark.alone(
    "measures a Spark pipeline's throughput or latency on two cores: other workers beside it would be measured too"
)
def test_offsets_behind_latest_from_the_progress(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(2)
    send(bootstrap, topic, [f"a{i}" for i in range(30)], partition=0)
    send(bootstrap, topic, [f"b{i}" for i in range(10)], partition=1)
    name, writer = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=20)
    query = writer.trigger(processingTime="1 hour").start()  # exactly one batch, then the test reads its progress
    try:
        wait_until(lambda: query.lastProgress is not None, "the first progress", 60)
        source = query.lastProgress["sources"][0]
    finally:
        query.stop()
    assert json.loads(source["endOffset"]) == {topic: {"0": 15, "1": 5}}  # 20 shared 30:10 by lag
    assert source_metrics(source) == {
        "minOffsetsBehindLatest": 5.0,
        "maxOffsetsBehindLatest": 15.0,
        "avgOffsetsBehindLatest": 10.0,
    }


def test_topic_weights_keep_a_busy_topic_from_starving_a_quiet_one(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    busy, quiet = kafka_broker.create_topic(1), kafka_broker.create_topic(1)
    send(bootstrap, busy, [f"b{i}" for i in range(300)])
    send(bootstrap, quiet, [f"q{i}" for i in range(200)])

    def first_batch(**options) -> dict:
        name, writer = stream(
            spark,
            bootstrap,
            subscribe=f"{busy},{quiet}",
            startingOffsets="earliest",
            maxOffsetsPerTrigger=100,
            **options,
        )
        query = writer.trigger(processingTime="1 hour").start()  # one batch, then its progress is read
        try:
            wait_until(lambda: query.lastProgress is not None, "the first progress", 60)
            return json.loads(query.lastProgress["sources"][0]["endOffset"])
        finally:
            query.stop()

    assert first_batch() == {busy: {"0": 60}, quiet: {"0": 40}}  # by lag, as Spark: 300:200
    assert first_batch(topicWeights=json.dumps({quiet: 3})) == {busy: {"0": 25}, quiet: {"0": 75}}


def batch_sizes(query) -> list[int]:
    """The rows of each batch that had any, from the query's progress."""
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_max_bytes_per_trigger_bounds_a_batch_by_the_records_sizes(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(1)
    send(bootstrap, topic, [f"{i:04d}" + "x" * 996 for i in range(50)])  # 1,000 bytes each
    # admission off: a cold session's first batch overruns the trigger, and admission would rightly
    # cut the second; the byte bound alone is under test
    name, writer = stream(
        spark, bootstrap, subscribe=topic, startingOffsets="earliest", maxBytesPerTrigger="10k", admission="false"
    )
    query = writer.trigger(processingTime="100 milliseconds").start()
    try:
        # a batch's progress is posted after its sink commit: wait for the progress, not the rows
        wait_until(lambda: sum(batch_sizes(query)) == 50, "every record's progress", 120)
        sizes = batch_sizes(query)
    finally:
        query.stop()
    assert sizes[:4] == [10, 10, 10, 10]  # 10,240 bytes hold ten records of 1,000
    assert sum(sizes) == 50 and len(values(spark, name)) == 50


def test_limits_count_records_on_a_transactional_topic(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(1)
    produce_transactions(bootstrap, topic, 4, 5)  # 20 records over 24 offsets: a commit marker after each 5

    def batches(**options) -> list[int]:
        name, writer = stream(
            spark,
            bootstrap,
            subscribe=topic,
            startingOffsets="earliest",
            maxOffsetsPerTrigger=10,
            admission="false",  # the record bound alone is under test (see the byte bound's test)
            **options,
        )
        query = writer.trigger(processingTime="100 milliseconds").start()
        try:
            wait_until(lambda: sum(batch_sizes(query)) == 20, "every record's progress", 120)
            assert len(values(spark, name)) == 20
            return batch_sizes(query)
        finally:
            query.stop()

    assert batches()[0] == 9  # Spark's way: ten offsets, one of them a marker
    assert batches(limitsCount="records") == [10, 10]


def test_commit_offsets_on_checkpoint_for_lag_tools(registered, kafka_broker) -> None:
    from aiokafka import TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import GroupCoordinatorNotAvailableError

    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(2)
    send(bootstrap, topic, ["a", "b", "c"], partition=0)
    send(bootstrap, topic, ["d"], partition=1)
    group = f"g-{topic}"
    name, writer = stream(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets="earliest",
        **{"kafka.group.id": group, "commitOffsetsOnCheckpoint": "true"},
    )
    query = writer.trigger(processingTime="200 milliseconds").start()

    async def committed() -> dict:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            found = await admin.list_consumer_group_offsets(
                group, partitions=[TopicPartition(topic, 0), TopicPartition(topic, 1)]
            )
        except GroupCoordinatorNotAvailableError:  # a broker's first group: its coordinator is still loading
            return {}
        finally:
            await admin.close()
        return {tp.partition: meta.offset for tp, meta in found.items()}

    try:  # Spark hands a source a batch's end (commit) when it plans the next batch, so one more record
        wait_until(lambda: len(values(spark, name)) == 4, "the first batch", 60)
        send(bootstrap, topic, ["e"], partition=1)
        wait_until(lambda: asyncio.run(committed()) == {0: 3, 1: 1}, "the group's offsets", 60)
    finally:
        query.stop()


def test_fail_on_data_loss_when_a_topic_is_deleted(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(1)
    send(bootstrap, topic, ["a"])
    name, writer = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest")
    query = writer.trigger(processingTime="200 milliseconds").start()
    try:
        wait_until(lambda: values(spark, name) == ["a"], "the record", 60)
        delete_topic(bootstrap, topic)
        with pytest.raises(Exception, match=rf"data lost: {topic}/0: the partition is gone \(topic deleted\?\)"):
            query.awaitTermination(60)
    finally:
        query.stop()
