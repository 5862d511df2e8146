"""``spark.readStream.format("sluice-kafka")``: direct Kafka for Structured Streaming, no connector jar.

Offsets are Spark's Kafka source JSON, ``{"topic": {"0": 42}}`` (the next offset to read per
partition).  Each micro-batch asks the brokers for the latest offsets (the direct mode's
:class:`~sluice.kafka.offsets_client.KafkaOffsets`, which also resolves ``subscribePattern``
and ``assign`` through :mod:`~sluice.kafka.topics`), bounds the batch
(``maxOffsetsPerTrigger``, the admitted rate, ``maxBytesPerTrigger``, :mod:`~sluice.spark_driver.structured.limits`;
counted in records rather than offsets with ``limitsCount=records``, through a sample of the current
offsets, :mod:`~sluice.spark_driver.direct.sampling`) and splits that bound
among topics by ``topicWeights``, then among partitions by lag with the per-partition minimum and maximum rates:
exactly direct mode's :func:`~sluice.kafka.offsets.max_messages_per_partition` and
``clamp``, with the batch taken as one trigger interval.  A task reads one ``[from, until)`` of
one Kafka partition (``minPartitions`` / ``maxRecordsPerPartition`` cut a hot partition's range
into several, :func:`~sluice.kafka.offsets.split_ranges`) with direct mode's
:func:`~sluice.spark_driver.direct.reader.read_range`.

Spark's Kafka source semantics: ``startingOffsets`` (or a start by time) applies to a new query
only (a restarted one resumes from its checkpoint); partitions that appear later (also topics a
pattern matches later) start at their earliest offset; ``minOffsetsPerTrigger`` holds a batch back
until enough records are there or ``maxTriggerDelay`` passed since the last batch (counted from
the query's start for the first); ``failOnDataLoss`` (default true) fails the query when offsets
it was to read are no longer in the log (retention, a deleted or recreated topic), and otherwise
logs and goes on from what is there.  Nothing is committed to a consumer group unless
``commitOffsetsOnCheckpoint`` asks for it: the checkpoint stays the source of truth, the group's
offsets are for lag tools (Flink's commit on checkpoint).

The Python Data Source API has no custom source metrics (PySpark's stream reader offers no
``metrics`` call and its JVM stream does not implement ``ReportsSourceMetrics``), so Spark's
``*OffsetsBehindLatest`` are computed from the progress instead: :func:`source_metrics` of
``query.lastProgress["sources"][i]`` (its ``endOffset`` and ``latestOffset``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from sluice.clock import Clock, SystemClock
from sluice.errors import InvalidArgument
from sluice.kafka.offsets import (
    batch_due,
    clamp,
    lag,
    max_messages_per_partition,
    offsets_behind,
)
from sluice.spark_driver.batch import kafka_schema
from sluice.spark_driver.direct.sampling import bound_in_offsets, sample
from sluice.spark_driver.structured.admission import read_rate
from sluice.spark_driver.structured.batch_timer import BatchTimer
from sluice.spark_driver.structured.kafka_batch import SluiceKafkaBatchReader
from sluice.spark_driver.structured.kafka_options import KafkaOptions, kafka_options
from sluice.spark_driver.structured.kafka_ranges import (
    Offsets,
    RangePartition,
    brokers,
    check_loss,
    range_partitions,
    read_rows,
    resolve,
)
from sluice.spark_driver.structured.limits import NO_FIXED_BOUND, batch_records, default_max_rows


def to_json(offsets: Offsets) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(offset: dict) -> Offsets:
    try:
        return {(topic, int(p)): int(o) for topic, parts in offset.items() for p, o in parts.items()}
    except (AttributeError, TypeError, ValueError):
        raise InvalidArgument(f"{offset!r} is not a Kafka source offset ({{topic: {{partition: offset}}}})") from None


def source_metrics(source_progress: Mapping[str, Any]) -> dict[str, float]:
    """Spark's ``min/max/avgOffsetsBehindLatest`` of one source of a progress
    (``query.lastProgress["sources"][i]``): its batch's end against the latest offsets it saw."""

    def offsets(field: str) -> Offsets:
        raw = source_progress.get(field)
        return from_json(json.loads(raw) if isinstance(raw, str) else raw or {})

    return offsets_behind(offsets("endOffset"), offsets("latestOffset"))


def batch_until(current: Offsets, latest: Offsets, records: int | None, options: KafkaOptions) -> Offsets:
    """Where each partition's batch ends: ``records`` (None: no bound) shared by lag, with the
    per-partition rate caps and floors for one trigger interval (pure: direct mode's maths)."""
    interval = options.limits.trigger_interval_ms
    rate = None if records is None else records * 1000 / interval
    limits = max_messages_per_partition(
        current,
        latest,
        rate,
        interval,
        options.max_rate_per_partition,
        options.min_rate_per_partition,
        options.topic_weights,
    )
    return clamp(current, latest, limits)


class SluiceKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The ``sluice-kafka`` source's reader (see the module doc)."""

    def __init__(self, options: KafkaOptions, clock: Clock | None = None) -> None:
        self.options = options
        self.clock = clock or SystemClock()
        self._kafka: Any = None
        self._group: Any = None
        self._target: Offsets | None = None
        self._last_batch_ms = self.clock.now_ms()  # maxTriggerDelay counts from here
        self._timer = BatchTimer(options.limits.trigger_interval_ms, self.clock)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_kafka": None, "_group": None}

    def _brokers(self) -> Any:
        if self._kafka is None:
            self._kafka = brokers(self.options)  # no group: reads offsets, commits none
        return self._kafka

    def initialOffset(self) -> dict:
        kafka = self._brokers()
        start = resolve(kafka, self.options.starting, kafka.partitions(), self.options.timestamp_strategy, "starting")
        return to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        rows = default_max_rows(self.options.limits)
        if rows is None and self.options.max_bytes_per_trigger is not None:
            rows = NO_FIXED_BOUND  # Spark passes a limit only where the source asks for one
        return ReadAllAvailable() if rows is None else ReadMaxRows(rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self._timer.available_now()
        self._target = self._brokers().latest_offsets()

    def _rate(self) -> float | None:
        if not self.options.limits.admission or self.options.rate_file is None:
            return None

        return read_rate(self.options.rate_file)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        overrun = self._timer.overrun_bound()  # first: the time since the last batch was planned
        kafka = self._brokers()
        current = from_json(start)
        latest = kafka.latest_offsets()
        new = [tp for tp in latest if tp not in current]
        if new:
            current.update(kafka.earliest_offsets(new))  # Spark: new partitions start at their earliest
        current = check_loss(kafka, current, latest, self.options.fail_on_data_loss, "sluice-kafka")
        if self._target is not None:
            latest = {tp: min(end, self._target.get(tp, current[tp])) for tp, end in latest.items()}
        if self._target is None and not self._due(current, latest):
            return start
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        records = batch_records(self.options.limits, max_rows, self._rate(), overrun=overrun)
        if max_rows is not None:
            records = self._held(records, current, latest)
        return to_json({**current, **batch_until(current, latest, records, self.options)})

    def _held(self, records: int | None, current: Offsets, latest: Offsets) -> int | None:
        """The batch's bound in offsets: ``limitsCount`` and ``maxBytesPerTrigger`` through a sample."""
        count, max_bytes = self.options.count_records and records is not None, self.options.max_bytes_per_trigger
        if not count and max_bytes is None:
            return records
        found = sample(self.options.bootstrap_servers, self.options.client_options, current, latest)
        bound = bound_in_offsets(records, found, lag(current, latest), count_records=count, max_bytes=max_bytes)
        return None if bound is None else max(1, int(bound))

    def _due(self, current: Offsets, latest: Offsets) -> bool:
        """``minOffsetsPerTrigger`` / ``maxTriggerDelay``: whether the next batch runs now."""
        now = self.clock.now_ms()
        available = sum(lag(current, latest).values())
        due = batch_due(
            available,
            self.options.min_offsets_per_trigger,
            now - self._last_batch_ms,
            self.options.max_trigger_delay_ms,
        )
        if due:
            self._last_batch_ms = now
        return due or available == 0

    def reportLatestOffset(self) -> dict:
        return to_json(self._brokers().latest_offsets())

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begin, until = from_json(start), from_json(end)
        new = [tp for tp in until if tp not in begin]
        if new:  # appeared in this batch: read from where latestOffset started them
            begin.update(self._brokers().earliest_offsets(new))
        ranges = {tp: o for tp, o in until.items() if o > begin[tp]}
        self._timer.planned(sum(o - begin[tp] for tp, o in ranges.items()))
        return range_partitions(self.options, begin, ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_rows(partition)

    def commit(self, end: dict) -> None:
        """With ``commitOffsetsOnCheckpoint``, the batch's end goes to the group ``kafka.group.id``
        for lag tools; the query's checkpoint stays what a restart resumes from (as in Spark)."""
        if not self.options.commit_offsets:
            return
        if self._group is None:
            self._group = brokers(self.options, self.options.group_id)
        self._group.commit(from_json(end))

    def stop(self) -> None:
        for name in ("_kafka", "_group"):
            kafka = getattr(self, name)
            setattr(self, name, None)
            if kafka is not None:
                kafka.close()


class SluiceKafkaDataSource(DataSource):
    """``format("sluice-kafka")``: the source's options in
    :func:`~sluice.spark_driver.structured.kafka_options.kafka_options`, the sink's in
    :func:`~sluice.spark_driver.structured.kafka_sink.sink_options`."""

    @classmethod
    def name(cls) -> str:
        return "sluice-kafka"

    def schema(self) -> Any:
        return kafka_schema(kafka_options(self.options, batch=True).include_headers)

    def streamReader(self, schema: Any) -> SluiceKafkaStreamReader:
        return SluiceKafkaStreamReader(kafka_options(self.options))

    def reader(self, schema: Any) -> Any:
        return SluiceKafkaBatchReader(kafka_options(self.options, batch=True))

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        """``writeStream.format("sluice-kafka")``: :mod:`~sluice.spark_driver.structured.kafka_sink`."""
        # the sink's module loads only when a query writes
        from sluice.spark_driver.structured.kafka_sink import SluiceKafkaStreamWriter, check_schema, sink_options

        options = sink_options(self.options)
        check_schema(schema, options)
        return SluiceKafkaStreamWriter(options)
