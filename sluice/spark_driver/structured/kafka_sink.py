"""``df.writeStream.format("sluice-kafka")``: a query's output written to Kafka once.

Spark's ``format("kafka")`` sink is at-least-once.  This one writes each task's rows in one Kafka
transaction, through :func:`sluice.spark_driver.kafka_sink.write_task` (``Batch.write_kafka``'s
tasks, whose docstring says how a re-run is recognised and an older attempt fenced), with the
transactional id ``sluice-<query id>-<task partition index>``: the query id is kept in the
checkpoint, so a query restarted from it uses the same ids, and every batch reuses them (a
query's batches run one after another); the batch id, recorded in each id's marker, is what a
re-run of a batch finds and writes nothing for.  A task learns both from the local properties
Spark's ``MicroBatchExecution`` sets for the batch's jobs (``sql.streaming.queryId``,
``streaming.sql.batchId``).

Options keep the meaning of Spark's Kafka sink (``KafkaSourceProvider``) where they apply:
``kafka.bootstrap.servers`` (required), ``topic`` (or a ``topic`` column; the option wins),
``kafka.<producer setting>`` as the Java client names it (``kafka.linger.ms``, ``kafka.acks``,
``kafka.transaction.timeout.ms``: aiokafka's same-named setting), plus ``kafkaClientOptions``
(JSON aiokafka settings, as the source takes them: TLS files, credentials by ``_file``/``_env``)
and ``mode`` (``exactly_once``, the default, or ``at_least_once``: an idempotent producer, no
transactions).  The columns are Spark's: ``value`` (string or binary, required), ``key`` (string
or binary), ``topic`` (string), ``headers`` (array of struct<key: string, value: binary>) and
``partition`` (int).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from sluice.spark_driver.kafka_sink import (
    MODES,
    KafkaSinkError,
    SinkSettings,
    TaskOutcome,
    df_row,
    write_task,
)
from sluice.spark_driver.structured.options import (
    OptionError,
    _bootstrap,
    _choice,
    _kafka_client,
    _lower,
    _optional_str,
    _refuse_unknown,
)

#: The local properties Spark's ``MicroBatchExecution`` gives a batch's jobs (``StreamExecution.QUERY_ID_KEY``,
#: ``MicroBatchExecution.BATCH_ID_KEY``).
QUERY_ID_KEY, BATCH_ID_KEY = "sql.streaming.queryId", "streaming.sql.batchId"

#: ``kafka.*`` settings the sink owns (Spark refuses the serializers too: records are bytes).
_OWNED = {
    "bootstrap_servers": "give kafka.bootstrap.servers",
    "transactional_id": "the sink derives one per task from the query id",
    "key_serializer": "keys are written as bytes (a string column as UTF-8)",
    "value_serializer": "values are written as bytes (a string column as UTF-8)",
}
#: The sink's options besides kafka.<producer setting>, with Spark's own that a sink is handed with
#: them (checkpointLocation, path, queryName).
_SINK_OPTIONS = (
    "kafka.bootstrap.servers",
    "topic",
    "mode",
    "kafkaClientOptions",
    "checkpointLocation",
    "path",
    "queryName",
)


@dataclass(frozen=True)
class SinkOptions:
    """The sink's settings (see the module doc), plain values to pickle to the tasks."""

    bootstrap_servers: str
    topic: str | None
    mode: str
    client: dict[str, Any]


def sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """The ``sluice-kafka`` sink's options, checked before the query starts (pure: no broker)."""
    # aiokafka loads when a query writes, not with the source's module
    from aiokafka import AIOKafkaProducer

    o = _lower(options)
    bootstrap = _bootstrap(o)
    client = _kafka_client(o, AIOKafkaProducer, _OWNED, _SINK_OPTIONS, "producer")
    _refuse_unknown(options, _SINK_OPTIONS, "sluice-kafka sink", kafka=True)
    return SinkOptions(bootstrap, _optional_str(o, "topic"), _choice(o, "mode", "exactly_once", MODES), client)


def check_schema(schema: Any, options: SinkOptions) -> None:
    """Spark's Kafka sink's column rules (``KafkaWriter.validateQuery``), refused before the query starts."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    header = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))
    rules = {
        "topic": ((StringType,), "a string"),
        "key": ((StringType, BinaryType), "a string or binary"),
        "value": ((StringType, BinaryType), "a string or binary"),
        "partition": ((IntegerType,), "an int"),
    }
    if "value" not in types:
        raise OptionError(f"the query has no value column (columns: {', '.join(schema.names)}): it is required")
    if options.topic is None and "topic" not in types:
        raise OptionError("the query has no topic column and no topic option: give one of them")
    for name, (allowed, what) in rules.items():
        if name in types and not isinstance(types[name], allowed):
            raise OptionError(f"column {name} is {types[name].simpleString()}: it must be {what}")
    if "headers" in types and types["headers"].simpleString() != header.simpleString():  # nullability aside
        raise OptionError(f"column headers is {types['headers'].simpleString()}: it must be {header.simpleString()}")


@dataclass(frozen=True)
class OutcomeMessage(WriterCommitMessage):
    """A task's :class:`~sluice.spark_driver.kafka_sink.TaskOutcome`, back to the commit."""

    outcome: TaskOutcome


class SluiceKafkaStreamWriter(DataSourceStreamWriter):
    """The ``sluice-kafka`` sink's writer (see the module doc)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> OutcomeMessage:
        context = TaskContext.get()
        assert context is not None  # write runs in a Spark task
        query, batch = context.getLocalProperty(QUERY_ID_KEY), context.getLocalProperty(BATCH_ID_KEY)
        if query is None or batch is None:
            raise KafkaSinkError("the sluice-kafka sink writes streaming queries only (no query or batch id)")
        o = self.options
        settings = SinkSettings(o.topic, o.bootstrap_servers, query, int(batch), o.mode, o.client, per_batch_ids=False)
        index = context.partitionId()
        outcome = asyncio.run(write_task(settings, index, [df_row(row) for row in iterator]))
        if outcome.status == "aborted":  # the task fails, and Spark's retry writes it again
            raise KafkaSinkError(f"batch {batch}: the transaction of partition {index} aborted ({outcome.error})")
        return OutcomeMessage(outcome)
