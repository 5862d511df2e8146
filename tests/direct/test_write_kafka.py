"""``Batch.write_kafka``: Kafka -> Sluice (direct mode) -> Kafka, read back ``read_committed``."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

import pytest

from sluice.kafka.client_settings import client_keywords, producer_options
from sluice.spark_driver.kafka_sink import (
    KafkaSinkError,
    SinkSettings,
    TaskOutcome,
    already_written,
    check_outcomes,
    encode_marker,
    output_state,
    record_row,
    transactional_id,
    write_task,
)
from sluice.spark_driver.metrics import REGISTRY
from tests.direct.conftest import complete, produce


def test_ids_name_the_app_the_batch_and_the_task() -> None:
    assert transactional_id("orders", 1000, 3) == "sluice-orders-1000-3"
    assert transactional_id("orders", 1000, 3) != transactional_id("orders", 2000, 3)
    assert transactional_id("query", None, 3) == "sluice-query-3"  # a query's: one per task, every batch


def test_only_this_tasks_marker_counts_as_written() -> None:
    mine = encode_marker(1000, 2)
    assert already_written(5, mine, 1000, 2)
    assert already_written(0, mine, 1000, 2)  # an empty partition's commit is a marker too
    assert not already_written(-1, mine, 1000, 2)  # the broker's "no offset committed"
    assert not already_written(None, None, 1000, 2)
    assert not already_written(5, mine, 1000, 3)
    assert not already_written(5, mine, 2000, 2)
    assert not already_written(5, "", 1000, 2)  # some other program's commit to the group


def test_a_writes_output_state_counts_its_tasks_by_outcome_and_an_abort_fails_the_batch() -> None:
    settings = SinkSettings("out", "k:9092", "app", 1000)
    outcomes = [TaskOutcome(0, "committed", 5), TaskOutcome(1, "already"), TaskOutcome(2, "empty")]
    assert output_state(settings, outcomes) == {
        "sink": "kafka", "topic": "out", "mode": "exactly_once", "records": 5,
        "committed": 1, "written": 0, "already": 1, "empty": 1, "aborted": 0,
    }  # fmt: skip
    check_outcomes(settings, outcomes)
    aborted = [*outcomes, TaskOutcome(3, "aborted", error="KafkaTimeoutError: no answer")]
    assert output_state(settings, aborted)["aborted"] == 1
    with pytest.raises(KafkaSinkError, match="partition 3: KafkaTimeoutError: no answer"):
        check_outcomes(settings, aborted)


def test_producer_options_keep_the_connection_and_drop_consumer_settings() -> None:
    table = {"security_protocol": "SASL_PLAINTEXT", "group_id": "g", "isolation_level": "read_committed"}
    assert producer_options(table) == {"security_protocol": "SASL_PLAINTEXT"}


def test_producer_options_drop_what_only_aiokafka_s_consumer_takes_and_keep_a_typo_to_be_refused() -> None:
    from aiokafka import AIOKafkaProducer

    table = {"client_rack": "r1", "max_poll_records": 5, "linger_ms": 5, "lingr_ms": 5}
    options = producer_options(table)
    assert options == {"linger_ms": 5, "lingr_ms": 5}  # a key neither takes: the producer names it
    assert set(options) - client_keywords(AIOKafkaProducer) == {"lingr_ms"}


def test_records_are_written_as_they_came() -> None:
    from sluice.records import Record

    record = Record(b"k", b"v", "t", 0, 7, 1, ((b"\xff", b"x"), ("h", None)))
    assert record_row(record) == (None, b"k", b"v", [("\ufffd", b"x"), ("h", None)], None)
    assert record_row("plain") == (None, None, b"plain", None, None)


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every committed value of ``topic`` (aborted and open transactions' records left out)."""
    return [r.value for r in read_records(bootstrap, topic, partitions)]


def read_records(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every committed record of ``topic``, as aiokafka's ``ConsumerRecord``."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    async def run() -> list[Any]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
        )
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)  # the last stable offsets
            values: list[Any] = []
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    values.extend(records)
            return values
        finally:
            await consumer.stop()

    return asyncio.run(run())


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


EXPECTED = sorted(f"v-{p}-{i}".encode() for p, n in ((0, 40), (1, 25)) for i in range(n))


def run_twice(kafka_broker, make_source, mode: str) -> list[bytes]:
    """One batch written, then written again as a restarted driver re-runs it (the first run's
    completion never reached the checkpoint), then completed."""
    source_topic, out = kafka_broker.create_topic(2), kafka_broker.create_topic(3)
    produce(kafka_broker.bootstrap, source_topic, {0: 40, 1: 25})
    source = make_source(source_topic)
    batch = source.create_batch(1000, None)
    app = f"t{uuid.uuid4().hex[:8]}"
    batch.write_kafka(out, bootstrap_servers=kafka_broker.bootstrap, mode=mode, app=app)
    rerun = source.rebuild_batch(1000)  # what recover() gives a restarted driver: the same ranges
    rerun.write_kafka(out, bootstrap_servers=kafka_broker.bootstrap, mode=mode, app=app)
    complete(source, rerun)
    return sorted(read_committed(kafka_broker.bootstrap, out, 3))


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_rerun_batch_leaves_every_record_once(kafka_broker, make_source) -> None:
    committed = sample("sluice_kafka_sink_transactions_total", {"outcome": "committed"})
    skipped = sample("sluice_kafka_sink_already_written_tasks_total")
    reruns = sample("sluice_kafka_sink_rerun_batches_total")
    assert run_twice(kafka_broker, make_source, "exactly_once") == EXPECTED
    assert sample("sluice_kafka_sink_transactions_total", {"outcome": "committed"}) == committed + 2
    assert sample("sluice_kafka_sink_already_written_tasks_total") == skipped + 2  # one per task
    assert sample("sluice_kafka_sink_rerun_batches_total") == reruns + 1


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_at_least_once_writes_a_rerun_again(kafka_broker, make_source) -> None:
    values = run_twice(kafka_broker, make_source, "at_least_once")
    assert Counter(values) == {v: 2 for v in EXPECTED}  # the duplicates this mode allows


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_dataframe_goes_to_its_partition_column_with_its_headers_once(kafka_broker, make_source) -> None:
    source_topic, out = kafka_broker.create_topic(2), kafka_broker.create_topic(3)
    produce(kafka_broker.bootstrap, source_topic, {0: 40, 1: 25})
    source = make_source(source_topic)
    app = f"t{uuid.uuid4().hex[:8]}"
    for batch in (source.create_batch(1000, None), source.rebuild_batch(1000)):
        df = batch.to_df().selectExpr(
            "key",
            "CAST(value AS STRING) AS value",  # Spark's sink takes string or binary
            "array(named_struct('key', 'from', 'value', CAST(CAST(partition AS STRING) AS BINARY))) AS headers",
            "2 AS partition",
        )
        batch.write_kafka(out, df, bootstrap_servers=kafka_broker.bootstrap, app=app)
    records = read_records(kafka_broker.bootstrap, out, 3)
    assert sorted(r.value for r in records) == EXPECTED
    assert {r.partition for r in records} == {2}
    assert all(list(r.headers) == [("from", r.value.split(b"-")[1])] for r in records)


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
# the thread method: a hung task holds the main thread in a py4j call that no signal interrupts
@pytest.mark.timeout(120, method="thread")
def test_more_tasks_than_output_partitions_each_write_once(kafka_broker, make_source) -> None:
    """Four tasks into a one-partition topic: every task's marker goes to partition 0 of the written
    topic (a marker on the task's own partition index was refused by the coordinator, and aiokafka
    retried it until the test's bound)."""
    source_topic, out = kafka_broker.create_topic(4), kafka_broker.create_topic(1)
    produce(kafka_broker.bootstrap, source_topic, {p: 10 for p in range(4)})
    source = make_source(source_topic)
    app = f"t{uuid.uuid4().hex[:8]}"
    for batch in (source.create_batch(1000, None), source.rebuild_batch(1000)):
        assert batch.to_df().rdd.getNumPartitions() == 4
        batch.write_kafka(out, bootstrap_servers=kafka_broker.bootstrap, app=app)
    assert sorted(read_committed(kafka_broker.bootstrap, out, 1)) == sorted(
        f"v-{p}-{i}".encode() for p in range(4) for i in range(10)
    )


@pytest.mark.kafka
@pytest.mark.slow
def test_a_retried_task_fences_the_attempt_whose_transaction_is_open(kafka_broker) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    out = kafka_broker.create_topic(1)
    settings = SinkSettings(out, kafka_broker.bootstrap, f"t{uuid.uuid4().hex[:8]}", 5000)
    rows = [(None, str(i).encode(), f"r-{i}".encode(), None, None) for i in range(30)]

    async def run() -> tuple[str, str, BaseException | None]:
        tid = transactional_id(settings.app, settings.batch_time_ms, 0)
        first = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, transactional_id=tid)
        await first.start()
        fenced: BaseException | None = None
        try:
            await first.begin_transaction()  # the first attempt: its records sent, not committed
            await asyncio.gather(*[await first.send(out, value=v, key=k) for _, k, v, _, _ in rows])
            retry = await write_task(settings, 0, rows)
            try:
                await first.commit_transaction()
            except KafkaError as error:
                fenced = error
        finally:
            await first.stop()
        again = await write_task(settings, 0, rows)  # yet another attempt: the marker is there
        return retry.status, again.status, fenced

    retry, again, fenced = asyncio.run(run())
    assert (retry, again) == ("committed", "already")
    assert type(fenced).__name__ == "ProducerFenced"
    assert sorted(read_committed(kafka_broker.bootstrap, out, 1)) == sorted(v for _, _, v, _, _ in rows)
