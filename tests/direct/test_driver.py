"""Direct mode under the real StreamingDriver (in this process, on the shared SparkSession)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sluice.spark_driver.direct import OffsetRange
from sluice.spark_driver.direct.source import DirectKafkaSource
from sluice.spark_driver.driver import StreamingDriver
from tests.direct.conftest import produce

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


class Infos:
    def __init__(self) -> None:
        self.completed = []

    def on_batch_submitted(self, info) -> None: ...

    def on_batch_started(self, info) -> None: ...

    def on_batch_completed(self, info) -> None:
        self.completed.append(info)


def test_available_now_drains_in_rate_bounded_batches(spark, kafka_broker, tmp_path) -> None:
    topic = kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {0: 300, 1: 100})
    source = DirectKafkaSource(
        kafka_broker.bootstrap, topic, f"g-{topic}", checkpoint_dir=str(tmp_path), max_rate_per_partition=500
    )
    seen: list[tuple[Sequence[OffsetRange], int]] = []
    driver = StreamingDriver(
        spark,
        source=source,
        trigger="available-now",
        batch_interval_ms=200,
        backpressure=False,
        options={"driver": {"trigger": "available-now"}},
    )
    infos = Infos()
    driver.add_listener(infos)
    driver.foreach_batch(lambda batch: seen.append((batch.offset_ranges, batch.rdd.count())))
    driver.start()
    assert driver.await_termination(120)
    # 500/s over 0.2 s: at most 100 per partition per batch; partition 0 needs three batches
    assert [sum(r.count for r in ranges) for ranges, _ in seen] == [200, 100, 100]
    assert all(count == sum(r.count for r in ranges) for ranges, count in seen)
    assert [info.offset_ranges for info in infos.completed] == [ranges for ranges, _ in seen]
    assert infos.completed[0].to_wire()["offset_ranges"] == [[topic, 0, 0, 100], [topic, 1, 0, 100]]
    assert source.committed_offsets() == {(topic, 0): 300, (topic, 1): 100}


def test_initial_rate_bounds_the_first_batch_split_by_lag(spark, kafka_broker, tmp_path) -> None:
    topic = kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {0: 3000, 1: 1000})
    source = DirectKafkaSource(kafka_broker.bootstrap, topic, f"g-{topic}", checkpoint_dir=str(tmp_path))
    first: list[Sequence[OffsetRange]] = []
    driver = StreamingDriver(
        spark,
        source=source,
        trigger="once",
        batch_interval_ms=500,
        backpressure=True,
        initial_rate=400,
        options={"driver": {"trigger": "once"}},
    )
    driver.foreach_batch(lambda batch: first.append(batch.offset_ranges))
    driver.start()
    assert driver.await_termination(120)
    # 400/s over 0.5 s = 200, shared 3000 : 1000
    assert [r.count for r in first[0]] == [150, 50]
    assert source.latest_published_rate() == 400
