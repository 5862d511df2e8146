"""``format("sluice-kafka")`` against the real tansu broker with the shared SparkSession: Spark's
Kafka source semantics for ``startingOffsets`` and ``failOnDataLoss``, the lag-weighted bound, and
admission through the rate file."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from sluice.spark_driver.structured.admission import RateFile
from tests.direct.conftest import produce

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


def start(spark, bootstrap: str, topic: str, **options):
    name = f"k{uuid.uuid4().hex[:8]}"
    reader = (
        spark.readStream.format("sluice-kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return name, reader.load().writeStream.format("memory").queryName(name).start()


def drain(query, *between) -> None:
    """Process what is there, then run each of ``between`` and process again; stop the query in any case."""
    try:
        query.processAllAvailable()
        for step in between:
            step()
            query.processAllAvailable()
    finally:
        query.stop()


def rows(spark, name: str) -> list[tuple[int, int, str]]:
    return sorted(
        (r.partition, r.offset, r.value.decode())
        for r in spark.sql(f"select partition, offset, value from {name}").collect()
    )


def test_starting_offsets_latest_then_json(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(2)
    produce(bootstrap, topic, {0: 5, 1: 5}, prefix="old")
    name, query = start(spark, bootstrap, topic)  # Spark's default for streaming: latest
    drain(query, lambda: produce(bootstrap, topic, {0: 2}, prefix="new"))
    assert rows(spark, name) == [(0, 5, "new-0-0"), (0, 6, "new-0-1")]

    name, query = start(spark, bootstrap, topic, startingOffsets=json.dumps({topic: {"0": 6, "1": -2}}))
    drain(query)
    assert rows(spark, name) == [(0, 6, "new-0-1"), *[(1, i, f"old-1-{i}") for i in range(5)]]


def test_fail_on_data_loss(registered, kafka_broker) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(1)
    produce(bootstrap, topic, {0: 3})
    gone = json.dumps({topic: {"0": 50}})  # a checkpoint past the log's end: the topic was recreated
    name, query = start(spark, bootstrap, topic, startingOffsets=gone)
    with pytest.raises(Exception, match=rf"data lost: {topic}/0: the log ends at 3, before offset 50"):
        query.processAllAvailable()
    query.stop()
    name, query = start(spark, bootstrap, topic, startingOffsets=gone, failOnDataLoss="false")
    drain(query, lambda: produce(bootstrap, topic, {0: 1}, prefix="after"))
    assert rows(spark, name) == [(0, 3, "after-0-0")]  # went on from what the log holds


def test_batches_are_split_by_lag_and_bounded_by_the_admitted_rate(registered, kafka_broker, tmp_path: Path) -> None:
    spark, bootstrap = registered, kafka_broker.bootstrap
    topic = kafka_broker.create_topic(2)
    produce(bootstrap, topic, {0: 90, 1: 10})
    name, query = start(spark, bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger=20)
    drain(query)
    first = json.loads(query.recentProgress[0]["sources"][0]["endOffset"])
    assert first == {topic: {"0": 18, "1": 2}}  # 20 shared 90:10 by lag
    assert len(rows(spark, name)) == 100

    rate_file = tmp_path / "rate.json"
    RateFile(str(rate_file)).publish(30.0)  # what the admission listener writes
    name, query = start(spark, bootstrap, topic, startingOffsets="earliest", rateFile=rate_file)
    drain(query)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 100 and max(sizes) <= 33, sizes  # 30/s for a 1 s trigger, +10 % headroom


def test_an_overrun_cuts_the_next_batch_of_a_processing_time_trigger_but_not_of_available_now(kafka_broker) -> None:
    """The reader on its own (no Spark), on a manual clock: a batch that ran 5 s for a 1 s trigger
    cuts the next to what fits one interval, unless the query runs ``Trigger.AvailableNow``, which
    has no interval to keep to and is bounded by ``maxOffsetsPerTrigger`` alone, as Spark's source."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sluice.clock import ManualClock
    from sluice.spark_driver.structured.kafka import SluiceKafkaStreamReader
    from sluice.spark_driver.structured.kafka_options import kafka_options

    topic = kafka_broker.create_topic(1)
    produce(kafka_broker.bootstrap, topic, {0: 100})

    def second_batch(available_now: bool) -> dict:
        options = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "subscribe": topic}
        options |= {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "40"}
        clock = ManualClock(1_000_000)
        reader = SluiceKafkaStreamReader(kafka_options(options), clock)
        try:
            if available_now:
                reader.prepareForTriggerAvailableNow()
            start = reader.initialOffset()
            first = reader.latestOffset(start, ReadMaxRows(40))
            reader.partitions(start, first)
            clock.advance(5000)  # the 40 records took 5 s for the default 1 s trigger
            return reader.latestOffset(first, ReadMaxRows(40))
        finally:
            reader.stop()

    assert second_batch(available_now=False) == {topic: {"0": 48}}  # 40 records per 5 s: 8 fit one interval
    assert second_batch(available_now=True) == {topic: {"0": 80}}
