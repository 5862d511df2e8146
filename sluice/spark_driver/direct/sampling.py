"""What a Kafka partition holds per offset, read from the records at its current offset.

Kafka answers offsets, not records or bytes, before a read.  An offset is a record only where the
log is dense: a compacted topic has gaps where keys were overwritten, a transactional one spends
an offset on each commit or abort marker, and a ``read_committed`` consumer skips aborted records.
So a bound in records or bytes becomes a bound in offsets through a sample: the first offsets of
each lagging partition read on the driver (:func:`sample`), their records and bytes per offset
(:class:`Sample`), and :func:`~sluice.kafka.offsets.offsets_holding` to convert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.block_info import OffsetRange
from sluice.kafka.offsets import TopicPartition, held_per_offset, offsets_holding
from sluice.records import Record
from sluice.spark_driver.direct.reader import read_range

#: Offsets read at each lagging partition's current offset (a few records, one fetch).
SAMPLE_OFFSETS = 20


@dataclass(frozen=True)
class Sample:
    """``records`` found among ``offsets`` offsets read, ``size`` their bytes (key, value, headers)."""

    offsets: int
    records: int
    size: int

    @property
    def records_per_offset(self) -> float:
        """At least one record per sample, so a sample that met only gaps still bounds the batch."""
        return max(self.records, 1) / self.offsets

    @property
    def bytes_per_offset(self) -> float:
        return max(self.size, 1) / self.offsets


def bound_in_offsets(
    records: float | None,
    found: Mapping[TopicPartition, Sample],
    lags: Mapping[TopicPartition, int],
    *,
    count_records: bool,
    max_bytes: int | None,
) -> float | None:
    """A batch's bound in offsets (None: none): ``records`` counted as records where
    ``count_records`` (else as offsets, Spark's way), and ``max_bytes``, through the samples.  Pure."""
    bounds = []
    if records is not None:
        per_offset = held_per_offset({tp: s.records_per_offset for tp, s in found.items()}, lags)
        bounds.append(records / (per_offset or 1) if count_records else records)
    if max_bytes:
        bounds.append(offsets_holding(max_bytes, {tp: s.bytes_per_offset for tp, s in found.items()}, lags))
    return min(bounds) if bounds else None


def record_bytes(record: Record) -> int:
    """A record's size for byte bounds: its key, value and headers."""
    headers = sum(len(k) + len(v or b"") for k, v in record.headers)
    return len(record.key or b"") + len(record.value or b"") + headers


def sample(
    bootstrap_servers: str,
    client_options: Mapping[str, Any],
    current: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    span: int = SAMPLE_OFFSETS,
) -> dict[TopicPartition, Sample]:
    """Read up to ``span`` offsets at each lagging partition's current offset, on this process."""

    found: dict[TopicPartition, Sample] = {}
    for (topic, partition), end in latest.items():
        at = current[(topic, partition)]
        offsets = min(end - at, span)
        if offsets > 0:
            records = list(
                read_range(
                    bootstrap_servers, OffsetRange(topic, partition, at, at + offsets), client_options=client_options
                )
            )
            found[(topic, partition)] = Sample(offsets, len(records), sum(record_bytes(r) for r in records))
    return found
