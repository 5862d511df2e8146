"""A batch's output written to Kafka once, however often it runs: ``Batch.write_kafka`` and the
``sluice-kafka`` Structured Streaming sink (:mod:`sluice.spark_driver.structured.kafka_sink`).

Spark's Kafka sink is at-least-once: a re-run batch or a retried task writes its records again.
Here each Spark task writes its partition of the batch in one Kafka transaction whose
transactional id is derived from the application (``write_kafka``'s ``app``, a query's id), the
batch time (``write_kafka`` only, whose batches may overlap) and the task's partition index
(:func:`transactional_id`), so every attempt of the same piece of output uses the same id:

* a retried or speculative attempt's ``InitProducerId`` bumps the id's epoch, which aborts the
  older attempt's open transaction (or waits until its commit is complete) and fences it: its
  later sends and its commit fail with ``ProducerFenced``;
* the same transaction commits a *marker*: a consumer-group offset of the group named as the
  transactional id, on partition 0 of the topic written (the first record's), the number of records
  as its offset and :func:`encode_marker` (the batch and the task) as its metadata.  Offsets
  committed in a transaction become visible exactly when its records do, so after its own
  ``InitProducerId`` a task that finds this batch's marker knows its output is committed and writes
  nothing (:func:`already_written`).  A query's ids serve every batch: the marker is the last batch
  the id committed, and a query's batches run one after another.  (Partition 0: the coordinator
  refuses an offset of a partition the topic does not have, which a task index may exceed.)

That covers a driver killed before the commit (the transaction is open: the re-run fences and
aborts it), during it (the re-run's ``InitProducerId`` completes it first, then sees the marker)
and after it but before the batch completed (the marker is there).  Only this task's own id
ever commits this marker, which is why the check needs no ``require_stable`` fetch.

Outcomes come back as the tasks' results, not through an accumulator: Spark drops the
accumulator updates of a failed task, and an aborted transaction is mostly a failed task's.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from sluice.errors import InvalidArgument, SluiceError
from sluice.kafka.client_settings import client_keywords, producer_options
from sluice.records import as_bytes
from sluice.spark_driver.metrics import (
    KAFKA_SINK_ALREADY_WRITTEN,
    KAFKA_SINK_COMMIT_SECONDS,
    KAFKA_SINK_RERUN_BATCHES,
    KAFKA_SINK_TRANSACTIONS,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import RDD

MODES = ("exactly_once", "at_least_once")
OUTCOMES = ("committed", "written", "already", "empty", "aborted")  # TaskOutcome.status
_MARKER_PREFIX = "sluice-sink/v1"


class KafkaSinkError(SluiceError, RuntimeError):
    """Raised by ``Batch.write_kafka`` when a task's transaction was aborted (a broker error while
    writing or committing); its output is not visible, so the batch's retry writes it again."""

    retriable = True


def transactional_id(app: str, batch_time_ms: int | None, partition: int) -> str:
    """The transactional id of one task's output: ``sluice-<app>-<batch time>-<partition index>``,
    or ``sluice-<app>-<partition index>`` for every batch of a query (``batch_time_ms`` None).

    Every attempt of that task, in this run of the driver or a later one, derives the same id:
    that is what fences an older attempt.  The marker's group is named the same."""
    return f"sluice-{app}-{partition}" if batch_time_ms is None else f"sluice-{app}-{batch_time_ms}-{partition}"


def encode_marker(batch_time_ms: int, partition: int) -> str:
    """The marker's offset metadata: which batch and task committed it (a commit of another
    program's to the same group is not mistaken for one)."""
    return f"{_MARKER_PREFIX} {batch_time_ms}/{partition}"


def already_written(offset: int | None, metadata: str | None, batch_time_ms: int, partition: int) -> bool:
    """Whether a fetched committed offset is this task's marker: an offset (``-1`` or ``None``:
    none committed) whose metadata is :func:`encode_marker` of this batch and task."""
    return offset is not None and offset >= 0 and metadata == encode_marker(batch_time_ms, partition)


@dataclass(frozen=True)
class TaskOutcome:
    """What one task did: ``committed`` (or ``written`` without a transaction), ``already``
    (its marker was there), ``empty`` (no rows: no transaction) or ``aborted`` (``error`` says why)."""

    partition: int
    status: str
    records: int = 0
    seconds: float = 0.0
    error: str = ""


@dataclass(frozen=True)
class SinkSettings:
    """Everything a task needs, pickled to the executors (plain values only).  ``topic`` None:
    each row names its own; ``per_batch_ids`` False: the ids serve every batch (a query's), the
    batch (``batch_time_ms``, a query's batch id) is only in the marker."""

    topic: str | None
    bootstrap_servers: str
    app: str
    batch_time_ms: int
    mode: str = "exactly_once"
    client: Mapping[str, Any] = field(default_factory=dict)
    per_batch_ids: bool = True

    def transactional_id(self, partition: int) -> str:
        return transactional_id(self.app, self.batch_time_ms if self.per_batch_ids else None, partition)


Row = tuple[str | None, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None, int | None]
"""A record to send: topic (None: the settings'), key, value, headers, partition (None: the partitioner's)."""


def _headers(headers: Any) -> list[tuple[str, bytes | None]] | None:
    """Headers as aiokafka sends them (``str`` keys: a key kept as bytes is read as Java does,
    malformed UTF-8 a U+FFFD); a DataFrame's are ``Row(key, value)`` structs."""
    if not headers:
        return None
    out = []
    for header in headers:
        key, value = (header["key"], header["value"]) if hasattr(header, "asDict") else header
        out.append((key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key), as_bytes(value)))
    return out


def record_row(record: Any) -> Row:
    """A batch's record as it came (key, value, headers; the partitioner picks the partition); a
    plain value (socket, generator) is the value alone."""
    if hasattr(record, "offset") and hasattr(record, "topic"):
        return (None, as_bytes(record.key), as_bytes(record.value), _headers(record.headers), None)
    return (None, None, as_bytes(record), None, None)


def df_row(row: Any) -> Row:
    """A DataFrame row's ``topic``, ``key``, ``value``, ``headers`` and ``partition``, as Spark's
    Kafka sink reads them (the settings' topic, when given, wins over the column, as Spark's option does)."""
    fields = row.asDict()
    partition = fields.get("partition")
    return (
        fields.get("topic"),
        as_bytes(fields.get("key")),
        as_bytes(fields.get("value")),
        _headers(fields.get("headers")),
        None if partition is None else int(partition),
    )


def _topic(settings: SinkSettings, row: Row) -> str:
    topic = settings.topic or row[0]
    if not topic:
        raise InvalidArgument("a row has no topic: give the topic option or a non-null topic column")
    return topic


async def _send_all(producer: Any, settings: SinkSettings, rows: Iterable[Row]) -> int:
    sent = []
    for row in rows:
        _, key, value, headers, partition = row
        topic = _topic(settings, row)
        sent.append(await producer.send(topic, value=value, key=key, headers=headers, partition=partition))
    await asyncio.gather(*sent)
    return len(sent)


async def _marker_present(settings: SinkSettings, index: int, options: dict[str, Any]) -> bool:
    # aiokafka loads in the task that writes, not with the driver
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    # the connection settings an admin client shares with a producer (the address is given here)
    shared = client_keywords(AIOKafkaAdminClient) - {"bootstrap_servers", "loop"}
    admin_options = {k: v for k, v in options.items() if k in shared}
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, **admin_options)
    await admin.start()
    group = settings.transactional_id(index)
    # a broker whose __consumer_offsets topic is still being created (the cluster's first group)
    # answers "coordinator not available": retriable, as the Java client's own lookup treats it
    backoff = options.get("retry_backoff_ms", 100) / 1000
    deadline = time.monotonic() + options.get("request_timeout_ms", 40_000) / 1000
    try:
        while True:
            try:
                found = await admin.list_consumer_group_offsets(group)
                break
            except KafkaError as error:
                if not error.retriable or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(backoff)
    finally:
        await admin.close()
    return any(already_written(c.offset, c.metadata, settings.batch_time_ms, index) for c in found.values())


async def write_task(settings: SinkSettings, index: int, rows: Sequence[Row]) -> TaskOutcome:
    """Write one task's rows (see the module's docstring); a fenced attempt raises
    ``ProducerFenced`` (another attempt owns the output), any other failure aborts and is reported."""
    # aiokafka loads in the task that writes, not with the driver
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError, ProducerFenced
    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    if not rows:  # nothing to write, and no earlier attempt of this task wrote anything either
        return TaskOutcome(index, "empty")
    options = producer_options(settings.client)
    if settings.mode == "at_least_once":
        options.update(enable_idempotence=True, acks="all")
        producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, **options)
        await producer.start()
        try:
            started = time.monotonic()
            count = await _send_all(producer, settings, rows)
            return TaskOutcome(index, "written", count, time.monotonic() - started)
        finally:
            await producer.stop()
    tid = settings.transactional_id(index)
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, transactional_id=tid, **options)
    await producer.start()  # InitProducerId: fences and settles every earlier attempt of this id
    try:
        if await _marker_present(settings, index, options):
            return TaskOutcome(index, "already")
        started = time.monotonic()
        await producer.begin_transaction()
        try:
            count = await _send_all(producer, settings, rows)
            marker = OffsetAndMetadata(count, encode_marker(settings.batch_time_ms, index))
            at = TopicPartition(_topic(settings, rows[0]), 0)
            await producer.send_offsets_to_transaction({at: marker}, tid)
            await producer.commit_transaction()
        except ProducerFenced:
            raise
        except KafkaError as error:
            try:
                await producer.abort_transaction()
            except KafkaError:  # the coordinator aborts it at transaction.timeout.ms anyway
                pass
            return TaskOutcome(index, "aborted", error=f"{type(error).__name__}: {error}")
        return TaskOutcome(index, "committed", count, time.monotonic() - started)
    finally:
        await producer.stop()


def _run_task(index: int, items: Iterator[Any], *, settings: SinkSettings, from_df: bool) -> Iterator[TaskOutcome]:
    """A Spark task's body (module-level: pickled by reference)."""
    to_row = df_row if from_df else record_row
    rows = [to_row(item) for item in items]
    yield asyncio.run(write_task(settings, index, rows))


def write_rdd(rdd: RDD, settings: SinkSettings, *, from_df: bool) -> list[TaskOutcome]:
    """Run the tasks and count their outcomes on the driver's registry; :func:`check_outcomes`
    then fails the batch if any aborted."""
    if settings.mode not in MODES:
        raise InvalidArgument(f"write_kafka mode {settings.mode!r} is not one of {', '.join(MODES)}")
    outcomes: list[TaskOutcome] = rdd.mapPartitionsWithIndex(
        partial(_run_task, settings=settings, from_df=from_df)
    ).collect()
    record_outcomes(outcomes)
    return outcomes


def output_state(settings: SinkSettings, outcomes: Sequence[TaskOutcome]) -> dict[str, Any]:
    """One write as the page shows it: the topic (None: each row's own), the mode, the records
    the tasks wrote, and how many tasks ended in each outcome (``already``: a re-run found its
    output committed and wrote nothing)."""
    counts = Counter(o.status for o in outcomes)
    return {
        "sink": "kafka",
        "topic": settings.topic,
        "mode": settings.mode,
        "records": sum(o.records for o in outcomes),
        **{status: counts[status] for status in OUTCOMES},
    }


def check_outcomes(settings: SinkSettings, outcomes: Sequence[TaskOutcome]) -> None:
    """Fail the batch if a task's transaction aborted: its output is not visible, and the batch's
    retry writes it again."""
    aborted = [o for o in outcomes if o.status == "aborted"]
    if aborted:
        detail = "; ".join(f"partition {o.partition}: {o.error}" for o in aborted)
        raise KafkaSinkError(
            f"batch {settings.batch_time_ms}: {len(aborted)} transaction(s) to {settings.topic} aborted ({detail})"
        )


def record_outcomes(outcomes: Iterable[TaskOutcome]) -> None:
    """The batch's outcomes on the driver's metrics."""
    rerun = False
    for outcome in outcomes:
        if outcome.status in ("committed", "aborted"):
            KAFKA_SINK_TRANSACTIONS.labels(outcome.status).inc()
        if outcome.status == "committed":
            KAFKA_SINK_COMMIT_SECONDS.observe(outcome.seconds)
        if outcome.status == "already":
            KAFKA_SINK_ALREADY_WRITTEN.inc()
            rerun = True
    if rerun:
        KAFKA_SINK_RERUN_BATCHES.inc()
