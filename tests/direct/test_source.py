"""DirectKafkaSource against the test broker and the shared SparkSession."""

from __future__ import annotations

import pytest

from sluice.kafka.offsets_client import KafkaOffsets
from sluice.spark_driver.direct import OffsetRange
from sluice.spark_driver.direct.checkpoint import checkpoint_path, load
from sluice.spark_driver.direct.source import DirectKafkaSource
from sluice.spark_driver.metrics import REGISTRY
from sluice.spark_driver.source import BatchSource, SourceError
from tests.direct.conftest import complete, counts, open_transaction, produce
from tests.polling import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_reads_each_range_in_its_own_task(kafka_broker, make_source) -> None:
    topic = kafka_broker.create_topic(3)
    produce(kafka_broker.bootstrap, topic, {0: 500, 1: 300, 2: 7})
    source: DirectKafkaSource = make_source(topic)
    assert isinstance(source, BatchSource)
    batch = source.create_batch(1000, None)
    assert batch.rdd.getNumPartitions() == 3
    assert batch.offset_ranges == (
        OffsetRange(topic, 0, 0, 500),
        OffsetRange(topic, 1, 0, 300),
        OffsetRange(topic, 2, 0, 7),
    )
    assert batch.num_records == 807 and batch.stream_records == {0: 807}
    records = complete(source, batch)
    assert sorted(r.value for r in records) == sorted(
        f"v-{p}-{i}".encode() for p, n in ((0, 500), (1, 300), (2, 7)) for i in range(n)
    )
    assert all(r.topic == topic and r.timestamp_ms > 0 for r in records)
    assert [r.offset for r in records if r.partition == 1] == list(range(300))
    # nothing new: empty ranges, still one task per partition
    empty = source.create_batch(2000, None)
    assert empty.num_records == 0 and empty.rdd.getNumPartitions() == 3
    assert empty.is_empty and not batch.is_empty  # known without a job, as Spark's KafkaRDD.isEmpty
    assert complete(source, empty) == []
    # a batch time not later than the last creates nothing
    assert source.create_batch(2000, None) is None


@pytest.mark.slow  # the first DataFrame of the session starts the JVM's SQL side
def test_to_df_has_the_kafka_schema(kafka_broker, make_source) -> None:
    topic = kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {0: 10, 1: 5})
    source = make_source(topic)
    batch = source.create_batch(1000, None)
    df = batch.to_text_df()
    assert df.count() == 15
    assert {row.value for row in df.where("partition = 1").collect()} == {f"v-1-{i}" for i in range(5)}


def test_skewed_partitions_drain_in_proportion(kafka_broker, make_source) -> None:
    topic = kafka_broker.create_topic(3)
    produce(kafka_broker.bootstrap, topic, {0: 3000, 1: 1000, 2: 200})
    source = make_source(topic, batch_interval_ms=1000, min_rate_per_partition=0)
    history = []
    for i in range(1, 8):
        batch = source.create_batch(i * 1000, 840.0)
        history.append(counts(batch))
        complete(source, batch)
    first = history[0]
    assert first == {0: 600, 1: 200, 2: 40}  # 840 shared 3000 : 1000 : 200
    for c in history[:5]:
        assert sum(c.values()) <= 840
        assert abs(c[0] - 3 * c[1]) <= 3 and abs(c[1] - 5 * c[2]) <= 5  # lags stay in proportion
    done = [
        next(i for i, c in enumerate(history) if sum(history[j][p] for j in range(i + 1)) == total)
        for p, total in ((0, 3000), (1, 1000), (2, 200))
    ]
    assert max(done) - min(done) <= 1  # all partitions finish draining together
    assert sum(sum(c.values()) for c in history) == 4200


def test_max_rate_per_partition_holds_batch_after_batch(kafka_broker, make_source) -> None:
    topic = kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {0: 2000, 1: 120})
    source = make_source(topic, batch_interval_ms=500, max_rate_per_partition=200)
    seen = []
    for i in range(1, 6):
        batch = source.create_batch(i * 500, None)  # no estimate: the caps alone apply
        seen.append(counts(batch))
        assert len(complete(source, batch)) == batch.num_records
    assert [c[0] for c in seen] == [100] * 5
    assert [c[1] for c in seen] == [100, 20, 0, 0, 0]
    # with a rate, the cap still holds per partition
    batch = source.create_batch(3000, 100_000.0)
    assert counts(batch)[0] == 100


def test_per_partition_caps_and_initial_rate(kafka_broker, make_source) -> None:
    topic = kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {0: 1000, 1: 1000})
    source = make_source(topic, batch_interval_ms=100, max_rate_per_partition={(topic, 0): 50, (topic, 1): 100})
    assert counts(source.create_batch(100, 1000.0)) == {0: 5, 1: 10}


def test_partitions_appearing_mid_run_are_read_from_earliest(kafka_broker, make_source) -> None:
    # tansu has no CreatePartitions, so the new partitions come from a subscribed topic created
    # while running: the same path (a partition in the latest offsets that has no current offset)
    topic = kafka_broker.create_topic(1)
    later = f"{topic}-later"
    produce(kafka_broker.bootstrap, topic, {0: 50})
    source = make_source(f"{topic},{later}", group_id=f"g-{topic}", auto_offset_reset="latest")
    first = source.create_batch(1000, None)  # only the *start* follows the reset policy
    assert first.offset_ranges == (OffsetRange(topic, 0, 50, 50),)
    complete(source, first)
    kafka_broker.create_topic(2, name=later)
    produce(kafka_broker.bootstrap, topic, {0: 5}, prefix="old")
    produce(kafka_broker.bootstrap, later, {0: 3, 1: 30}, prefix="new")
    batch = source.create_batch(2000, None)
    assert batch.offset_ranges == (
        OffsetRange(topic, 0, 50, 55),
        OffsetRange(later, 0, 0, 3),
        OffsetRange(later, 1, 0, 30),
    )
    records = complete(source, batch)
    assert sorted(r.value for r in records if r.topic == later and r.partition == 1) == sorted(
        f"new-1-{i}".encode() for i in range(30)
    )
    assert len(records) == 38


def test_offsets_committed_and_checkpointed_after_completion(kafka_broker, make_source, tmp_path) -> None:
    topic = kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {0: 100, 1: 100})
    source = make_source(topic, batch_interval_ms=1000, max_rate_per_partition=30)
    b1 = source.create_batch(1000, None)
    b2 = source.create_batch(2000, None)
    state = load(checkpoint_path(tmp_path / "ckpt"))
    assert [p.time_ms for p in state.pending] == [1000, 2000]  # written before the batches ran
    complete(source, b2)  # out of order (concurrent jobs): nothing may be skipped
    assert source.committed_offsets() == {(topic, 0): 0, (topic, 1): 0}
    complete(source, b1)
    assert source.committed_offsets() == {(topic, 0): 60, (topic, 1): 60}
    kafka = KafkaOffsets(kafka_broker.bootstrap, [topic], f"g-{topic}")
    kafka.start()
    try:
        assert kafka.committed([(topic, 0), (topic, 1)]) == {(topic, 0): 60, (topic, 1): 60}
    finally:
        kafka.close()
    state = load(checkpoint_path(tmp_path / "ckpt"))
    assert state.pending == [] and state.next_offsets == {(topic, 0): 60, (topic, 1): 60}


def test_restart_rebuilds_pending_batches_with_the_same_ranges(kafka_broker, make_source, tmp_path) -> None:
    topic = kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {0: 100, 1: 40})
    first = make_source(topic, max_rate_per_partition=25)
    done = first.create_batch(1000, None)
    complete(first, done)
    lost = first.create_batch(2000, None)  # the driver dies while this one runs
    first.stop()
    second = make_source(topic, max_rate_per_partition=25)
    assert second.recover() == [2000]
    again = second.rebuild_batch(2000)
    assert again.offset_ranges == lost.offset_ranges
    assert sorted(complete(second, again)) == sorted(lost.rdd.collect())
    assert second.create_batch(2000, None) is None
    nxt = second.create_batch(3000, None)
    assert [r.from_offset for r in nxt.offset_ranges] == [50, 40]


def test_group_commits_used_without_checkpoint(kafka_broker, make_source, tmp_path) -> None:
    topic = kafka_broker.create_topic(1)
    produce(kafka_broker.bootstrap, topic, {0: 80})
    first = make_source(topic, checkpoint_dir=tmp_path / "a", max_rate_per_partition=30)
    complete(first, first.create_batch(1000, None))
    second = make_source(topic, checkpoint_dir=tmp_path / "b")
    assert second.create_batch(1000, None).offset_ranges == (OffsetRange(topic, 0, 30, 80),)


def test_checkpoint_of_another_group_is_refused(kafka_broker, make_source, tmp_path) -> None:
    topic = kafka_broker.create_topic(1)
    make_source(topic, group_id="one")
    with pytest.raises(SourceError, match="belongs to group 'one'"):
        make_source(topic, group_id="two")


def test_unreachable_brokers_fail_with_the_broker_error(spark, tmp_path) -> None:
    from sluice.embedded import free_port
    from sluice.spark_driver.direct.source import DirectKafkaSource
    from sluice.spark_driver.source import SourceContext

    source = DirectKafkaSource(
        f"127.0.0.1:{free_port()}", "t", checkpoint_dir=str(tmp_path), max_retries=1, retry_backoff_ms=10
    )
    with pytest.raises(SourceError, match="2 attempt"):
        source.start(SourceContext(spark, 1000))
    source.stop()
    source.stop()


@pytest.mark.slow
def test_latest_offsets_retry_then_fail_the_batch(spark, tmp_path) -> None:
    from sluice.embedded import start_broker
    from sluice.spark_driver.direct import metrics
    from sluice.spark_driver.direct.source import DirectKafkaSource
    from sluice.spark_driver.source import SourceContext

    broker = start_broker()  # a private broker: this test stops it
    try:
        topic = broker.create_topic(1)
        source = DirectKafkaSource(
            broker.bootstrap, topic, checkpoint_dir=str(tmp_path), max_retries=2, retry_backoff_ms=10
        )
        source.start(SourceContext(spark, 1000))
        source._kafka.request_timeout_s = 2.0
    finally:
        broker.stop()
    failures = metrics.OFFSET_REQUEST_FAILURES._value.get()
    try:
        with pytest.raises(SourceError, match=r"batch 1000: latest offsets .* failed after 3 attempt"):
            source.create_batch(1000, None)
        assert metrics.OFFSET_REQUEST_FAILURES._value.get() == failures + 1
        assert source.recover() == []  # nothing was checkpointed for the failed batch
    finally:
        source.stop()


def test_metrics_per_partition(kafka_broker, make_source) -> None:
    topic = kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {0: 100, 1: 10})
    source = make_source(topic, max_rate_per_partition=40)
    complete(source, source.create_batch(1000, None))
    sample = REGISTRY.get_sample_value  # the driver's registry: direct mode's metrics are the driver's
    assert sample("sluice_direct_range_records", {"topic": topic, "partition": "0"}) == 40
    assert sample("sluice_direct_range_records", {"topic": topic, "partition": "1"}) == 10
    assert sample("sluice_direct_partition_lag", {"topic": topic, "partition": "0"}) == 60
    assert sample("sluice_direct_partition_lag", {"topic": topic, "partition": "1"}) == 0


def test_the_planned_end_under_read_committed_stops_at_an_open_transaction(kafka_broker, make_source, tmp_path) -> None:
    topic = kafka_broker.create_topic(1)
    produce(kafka_broker.bootstrap, topic, {0: 5})
    labels = {"topic": topic, "partition": "0"}
    with open_transaction(kafka_broker.bootstrap, topic, 7):  # offsets 5..11, not committed
        committed = make_source(topic, client_options={"isolation_level": "read_committed"}, group_id=f"rc-{topic}")
        everything = make_source(topic, group_id=f"ru-{topic}", checkpoint_dir=tmp_path / "ru")
        assert counts(committed.create_batch(1000, None)) == {0: 5}  # the last stable offset
        assert REGISTRY.get_sample_value("sluice_direct_open_transaction_records", labels) == 7
        assert counts(everything.create_batch(1000, None)) == {0: 12}  # the high watermark
    # committed: its marker takes offset 12, and once the broker has written it the end moves past it
    ends = KafkaOffsets(kafka_broker.bootstrap, [topic], None, client_options={"isolation_level": "read_committed"})
    ends.start()
    try:
        wait_until(lambda: ends.latest_offsets() == {(topic, 0): 13}, "the commit marker written", 30)
    finally:
        ends.close()
    assert [(r.from_offset, r.until_offset) for r in committed.create_batch(2000, None).offset_ranges] == [(5, 13)]
    assert REGISTRY.get_sample_value("sluice_direct_open_transaction_records", labels) == 0
