"""``writeStream.format("sluice-kafka")``: its options and columns checked before the query starts,
and a batch that Spark runs again after a restart leaving each record once for a read_committed reader
(a SIGKILLed query: ``test_exactly_once``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.types import ArrayType, IntegerType, LongType, StringType, StructField, StructType

from sluice.spark_driver.structured.kafka_sink import check_schema, sink_options
from sluice.spark_driver.structured.options import OptionError
from tests.direct.conftest import produce
from tests.direct.test_write_kafka import read_records

BROKERS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_kafka_settings_become_the_producer_s_and_spark_s_own_options_pass() -> None:
    options = sink_options(
        {
            **BROKERS,
            "topic": "out",
            "kafka.linger.ms": "5",
            "kafka.enable.idempotence": "true",
            "kafka.acks": "all",
            "kafkaClientOptions": '{"security_protocol": "PLAINTEXT"}',
            "checkpointLocation": "/tmp/c",
        }
    )
    assert options.client == {
        "security_protocol": "PLAINTEXT",
        "linger_ms": 5,
        "enable_idempotence": True,
        "acks": "all",
    }
    assert (options.topic, options.mode) == ("out", "exactly_once")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option kafka.bootstrap.servers is missing: give the brokers' HOST:PORT list"),
        (
            {**BROKERS, "mode": "twice"},
            "option mode = 'twice' is not allowed: expected one of exactly_once, at_least_once",
        ),
        ({**BROKERS, "kafka.transactional.id": "x"}, "option kafka.transactional.id is not allowed: the sink derives"),
        (
            {**BROKERS, "kafka.value.serializer": "x"},
            "option kafka.value.serializer is not allowed: values are written as bytes",
        ),
        (
            {**BROKERS, "kafka.lingr.ms": "5"},
            r"option kafka.lingr.ms is not a producer setting: expected kafka\. and one of .*linger\.ms",
        ),
        (
            {**BROKERS, "topc": "out"},
            "option topc is not a sluice-kafka sink option: expected one of kafka.bootstrap.servers, topic, mode",
        ),
    ],
)
def test_bad_options_are_named_with_what_is_allowed(options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        sink_options(options)


@pytest.mark.parametrize(
    ("columns", "topic", "message"),
    [
        ({"key": StringType()}, "out", "the query has no value column .columns: key.: it is required"),
        ({"value": StringType()}, None, "the query has no topic column and no topic option: give one of them"),
        ({"value": IntegerType()}, "out", "column value is int: it must be a string or binary"),
        ({"value": StringType(), "partition": LongType()}, "out", "column partition is bigint: it must be an int"),
        (
            {"value": StringType(), "headers": ArrayType(StringType())},
            "out",
            "column headers is array<string>: it must be array<struct<key:string,value:binary>>",
        ),
    ],
)
def test_columns_follow_spark_s_kafka_sink(columns: dict, topic: str | None, message: str) -> None:
    schema = StructType([StructField(name, data_type) for name, data_type in columns.items()])
    with pytest.raises(OptionError, match=message):
        check_schema(schema, sink_options({**BROKERS, **({"topic": topic} if topic else {})}))


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_batch_run_again_after_a_restart_writes_nothing_twice(registered, kafka_broker, tmp_path: Path) -> None:
    """Topic, key, headers and partition columns, written once; then the query's last batch is run
    again from the checkpoint (its commit-log entry removed, as a query killed after its write and
    before that entry leaves it) and writes nothing."""
    source, out = kafka_broker.create_topic(2), kafka_broker.create_topic(3)
    produce(kafka_broker.bootstrap, source, {0: 40, 1: 25})
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (
            registered.readStream.format("sluice-kafka")
            .options(**{"kafka.bootstrap.servers": kafka_broker.bootstrap, "subscribe": source})
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr(
                f"'{out}' AS topic",
                "key",
                "value",
                "array(named_struct('key', 'from', 'value', CAST(CAST(partition AS STRING) AS BINARY))) AS headers",
                "2 AS partition",
            )
            .writeStream.format("sluice-kafka")
            .option("kafka.bootstrap.servers", kafka_broker.bootstrap)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None

    run()
    assert sorted(p.name for p in (checkpoint / "commits").iterdir()) == [".0.crc", "0"]  # one batch
    for name in (".0.crc", "0"):
        (checkpoint / "commits" / name).unlink()
    run()  # Spark runs batch 0 again: its offsets are logged, its commit is not
    assert (checkpoint / "commits" / "0").exists()
    records = read_records(kafka_broker.bootstrap, out, 3)
    assert sorted(r.value for r in records) == sorted(
        f"v-{p}-{i}".encode() for p, n in ((0, 40), (1, 25)) for i in range(n)
    )
    assert {r.partition for r in records} == {2}
    assert all(list(r.headers) == [("from", r.value.split(b"-")[1])] for r in records)
