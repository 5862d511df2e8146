"""``spark.readStream.format("sluice-kafka")``: direct Kafka for Structured Streaming, no connector jar.

Offsets are Spark's Kafka source JSON, ``{"topic": {"0": 42}}`` (the next offset to read per
partition).  Each micro-batch asks the brokers for the latest offsets (the direct mode's
:class:`~sluice.spark_driver.direct.kafka.KafkaOffsets`), bounds the batch (``maxOffsetsPerTrigger``
and the admitted rate, :mod:`~sluice.spark_driver.structured.limits`) and splits that bound among
partitions by lag with the per-partition minimum and maximum rates: exactly direct mode's
:func:`~sluice.spark_driver.direct.offsets.max_messages_per_partition` and ``clamp``, with the
batch taken as one trigger interval, so the minimum-rate fix (``ceil(min rate x seconds)``) holds
here too.  A partition is one Kafka partition's ``[from, until)``, read in a task by direct mode's
:func:`~sluice.spark_driver.direct.reader.read_range`.

Spark's Kafka source semantics: ``startingOffsets`` applies to a new query only (a restarted one
resumes from its checkpoint); partitions that appear later start at their earliest offset;
``failOnDataLoss`` (default true) fails the query when offsets it was to read are no longer in the
log (retention, a recreated topic), and otherwise logs and goes on from what is there.  Nothing is
committed to a consumer group: the checkpoint is the source of truth, as in Spark.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from sluice.block_info import OffsetRange
from sluice.errors import InvalidArgument, SluiceError
from sluice.spark_driver.batch import kafka_schema, record_to_row
from sluice.spark_driver.direct.offsets import TopicPartition, clamp, max_messages_per_partition
from sluice.spark_driver.structured.limits import batch_records, default_max_rows
from sluice.spark_driver.structured.options import EARLIEST, LATEST, KafkaOptions, OptionError, kafka_options

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]


class DataLossError(SluiceError, RuntimeError):
    """Offsets the query was to read are gone from the log (``failOnDataLoss=true``)."""


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


def batch_until(current: Offsets, latest: Offsets, records: int | None, options: KafkaOptions) -> Offsets:
    """Where each partition's batch ends: ``records`` (None: no bound) shared by lag, with the
    per-partition rate caps and floors for one trigger interval (pure: direct mode's maths)."""
    interval = options.limits.trigger_interval_ms
    rate = None if records is None else records * 1000 / interval
    limits = max_messages_per_partition(
        current, latest, rate, interval, options.max_rate_per_partition, options.min_rate_per_partition
    )
    return clamp(current, latest, limits)


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One partition's ``[from, until)`` and how to reach its brokers (the client options as given:
    an SSL context is built in the task, it does not pickle)."""

    range_wire: list
    bootstrap_servers: str
    client_options: dict[str, Any]


class SluiceKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The ``sluice-kafka`` source's reader (see the module doc)."""

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options
        self._kafka: Any = None
        self._target: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_kafka": None}

    def _brokers(self) -> Any:
        if self._kafka is None:
            from sluice.receiver.sources.kafka import consumer_options
            from sluice.spark_driver.direct.kafka import KafkaOffsets

            kafka = KafkaOffsets(
                self.options.bootstrap_servers,
                self.options.topics,
                None,  # no group: this source reads offsets and commits none
                client_options=consumer_options(self.options.client_options),
            )
            kafka.start()
            self._kafka = kafka
        return self._kafka

    def initialOffset(self) -> dict:
        kafka = self._brokers()
        partitions = kafka.partitions()
        starting = self.options.starting
        if starting == "earliest":
            return to_json(kafka.earliest_offsets(partitions))
        if starting == "latest":
            return to_json(kafka.latest_offsets(partitions))
        assert isinstance(starting, dict)
        missing = sorted(set(partitions) - set(starting))
        if missing:
            raise OptionError(
                f"option startingOffsets has no offset for {', '.join(f'{t}/{p}' for t, p in missing)}: "
                "give every partition of the subscribed topics"
            )
        earliest = kafka.earliest_offsets([tp for tp, o in starting.items() if o == EARLIEST])
        latest = kafka.latest_offsets([tp for tp, o in starting.items() if o == LATEST])
        return to_json({tp: earliest.get(tp, latest.get(tp, o)) for tp, o in starting.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        rows = default_max_rows(self.options.limits)
        return ReadAllAvailable() if rows is None else ReadMaxRows(rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._brokers().latest_offsets()

    def _rate(self) -> float | None:
        if not self.options.limits.admission or self.options.rate_file is None:
            return None
        from sluice.spark_driver.structured.admission import read_rate

        return read_rate(self.options.rate_file)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        kafka = self._brokers()
        current = from_json(start)
        latest = kafka.latest_offsets()
        new = [tp for tp in latest if tp not in current]
        if new:
            current.update(kafka.earliest_offsets(new))  # Spark: new partitions start at their earliest
        current = self._check_loss(current, latest)
        if self._target is not None:
            latest = {tp: min(end, self._target.get(tp, current[tp])) for tp, end in latest.items()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        records = batch_records(self.options.limits, max_rows, self._rate())
        return to_json({**current, **batch_until(current, latest, records, self.options)})

    def _check_loss(self, current: Offsets, latest: Offsets) -> Offsets:
        """``current`` moved to the earliest offsets still in the log, or :class:`DataLossError`."""
        earliest = self._brokers().earliest_offsets(list(current))
        lost = {tp: (o, earliest[tp]) for tp, o in current.items() if tp in earliest and o < earliest[tp]}
        behind = {tp: (o, latest[tp]) for tp, o in current.items() if tp in latest and latest[tp] < o}
        if not lost and not behind:
            return current
        what = "; ".join(
            [
                *(f"{t}/{p}: offsets {o} to {e - 1} are no longer in the log" for (t, p), (o, e) in lost.items()),
                *(
                    f"{t}/{p}: the log ends at {e}, before offset {o} (topic recreated?)"
                    for (t, p), (o, e) in behind.items()
                ),
            ]
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"sluice-kafka: data lost: {what}. Set failOnDataLoss=false to go on from what the log holds"
            )
        log.warning("sluice-kafka: data lost, going on (failOnDataLoss=false): %s", what)
        moved = dict(current)
        moved.update({tp: e for tp, (_, e) in lost.items()})
        moved.update({tp: e for tp, (_, e) in behind.items()})
        return moved

    def reportLatestOffset(self) -> dict:
        return to_json(self._brokers().latest_offsets())

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begin, until = from_json(start), from_json(end)
        new = [tp for tp in until if tp not in begin]
        if new:  # appeared in this batch: read from where latestOffset started them
            begin.update(self._brokers().earliest_offsets(new))
        return [
            RangePartition(
                OffsetRange(t, p, begin[(t, p)], o).to_wire(),
                self.options.bootstrap_servers,
                self.options.client_options,
            )
            for (t, p), o in sorted(until.items())
            if o > begin[(t, p)]
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        from sluice.receiver.sources.kafka import consumer_options
        from sluice.spark_driver.direct.reader import read_range

        assert isinstance(partition, RangePartition)
        found = read_range(
            partition.bootstrap_servers,
            OffsetRange.from_wire(partition.range_wire),
            client_options=consumer_options(partition.client_options),
        )
        return (record_to_row(r) for r in found)

    def commit(self, end: dict) -> None:
        """Nothing to do: the query's checkpoint holds the offsets (Spark commits none to Kafka either)."""

    def stop(self) -> None:
        kafka, self._kafka = self._kafka, None
        if kafka is not None:
            kafka.close()


class SluiceKafkaDataSource(DataSource):
    """``format("sluice-kafka")``: options in :func:`~sluice.spark_driver.structured.options.kafka_options`."""

    @classmethod
    def name(cls) -> str:
        return "sluice-kafka"

    def schema(self) -> Any:
        return kafka_schema()

    def streamReader(self, schema: Any) -> SluiceKafkaStreamReader:
        return SluiceKafkaStreamReader(kafka_options(self.options))
