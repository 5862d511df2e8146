"""What the ``sluice-kafka`` stream reader and its batch reader share: the brokers, a position
resolved to offsets, the tasks of a range and how a task reads one, and the data-loss check.

Both readers of :mod:`~sluice.spark_driver.structured.kafka` (the stream) and
:mod:`~sluice.spark_driver.structured.kafka_batch` (a bounded read) stand on this module, so the
data source can name its batch reader without either module importing the other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from sluice.block_info import OffsetRange
from sluice.kafka.offsets import DataLossError, TopicPartition, by_timestamp, data_loss, offset_ranges, split_ranges
from sluice.kafka.offsets_client import KafkaOffsets
from sluice.spark_driver.batch import kafka_arrow_batch
from sluice.spark_driver.direct.reader import read_range_chunks
from sluice.spark_driver.structured.kafka_options import EARLIEST, LATEST, KafkaOptions, Position
from sluice.spark_driver.structured.options import OptionError
from sluice.storage.dead_letters import BadRecordHandling

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]
"""The next offset to read of each partition."""


def brokers(options: KafkaOptions, group_id: str | None = None) -> Any:
    """A started :class:`~sluice.kafka.offsets_client.KafkaOffsets` for the options' topics."""
    kafka = KafkaOffsets(options.bootstrap_servers, options.selection, group_id, client_options=options.client_options)
    kafka.start()
    return kafka


def resolve(kafka: Any, position: Position, partitions: list[TopicPartition], strategy: str, what: str) -> Offsets:
    """``position`` as offsets of ``partitions``: by time (``strategy`` where no record is that
    late, see :func:`~sluice.kafka.offsets.by_timestamp`) or earliest/latest/JSON."""
    per_partition = position.timestamps if position.timestamps is not None else position.offsets
    if isinstance(per_partition, dict):
        missing = sorted(set(partitions) - set(per_partition))
        if missing:
            name = f"{what}OffsetsByTimestamp" if position.timestamps is not None else f"{what}Offsets"
            raise OptionError(
                f"option {name} has no position for {', '.join(f'{t}/{p}' for t, p in missing)}: "
                "give every partition of the selected topics"
            )
    if position.timestamp is not None or position.timestamps is not None:
        stamp = position.timestamp
        stamps = position.timestamps or {tp: stamp for tp in partitions if stamp is not None}
        found = kafka.offsets_for_times({tp: stamps[tp] for tp in partitions})
        name = f"{what}Timestamp" if position.timestamp is not None else f"{what}OffsetsByTimestamp"
        return by_timestamp(found, kafka.latest_offsets(partitions), strategy, f"option {name}")
    if position.offsets == "earliest":
        return kafka.earliest_offsets(partitions)
    if position.offsets == "latest":
        return kafka.latest_offsets(partitions)
    assert isinstance(per_partition, dict)
    wanted = {tp: per_partition[tp] for tp in partitions}
    earliest = kafka.earliest_offsets([tp for tp, o in wanted.items() if o == EARLIEST])
    latest = kafka.latest_offsets([tp for tp, o in wanted.items() if o == LATEST])
    return {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in wanted.items()}


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One partition's ``[from, until)`` and how to reach its brokers (the client options as given:
    an SSL context is built in the task, it does not pickle)."""

    range_wire: list
    bootstrap_servers: str
    client_options: dict[str, Any]
    include_headers: bool = False
    bad_records: BadRecordHandling | None = None  # the badRecords option; None: fail


def range_partitions(options: KafkaOptions, begin: Offsets, until: Offsets) -> list[RangePartition]:
    """The tasks of ``[begin, until)``: one per partition's range, hot ones cut by ``minPartitions``
    and ``maxRecordsPerPartition``."""
    ranges = split_ranges(offset_ranges(begin, until), options.min_partitions, options.max_records_per_partition)
    return [
        RangePartition(
            r.to_wire(), options.bootstrap_servers, options.client_options, options.include_headers, options.bad_records
        )
        for r in ranges
    ]


def read_rows(partition: InputPartition) -> Iterator[Any]:
    """Task side: the range's records as Arrow record batches of the source's schema, one per chunk
    read (:func:`~sluice.spark_driver.batch.kafka_arrow_batch`: PySpark would convert tuples a field
    at a time in Python)."""
    assert isinstance(partition, RangePartition)
    chunks = read_range_chunks(
        partition.bootstrap_servers,
        OffsetRange.from_wire(partition.range_wire),
        client_options=partition.client_options,
        bad_records=partition.bad_records,
    )
    return (kafka_arrow_batch(records, partition.include_headers) for records in chunks)


def check_loss(kafka: Any, current: Offsets, latest: Offsets, fail: bool, what: str) -> Offsets:
    """``current`` moved to what the log still holds, or :class:`DataLossError` when ``fail``
    (Spark's ``failOnDataLoss``; the cases: :func:`~sluice.kafka.offsets.data_loss`)."""
    moved, lost = data_loss(current, kafka.earliest_offsets([tp for tp in current if tp in latest]), latest)
    if not lost:
        return current
    if fail:
        raise DataLossError(
            f"{what}: data lost: {'; '.join(lost)}. Set failOnDataLoss=false to go on from what the log holds"
        )
    log.warning("%s: data lost, going on (failOnDataLoss=false): %s", what, "; ".join(lost))
    return moved
