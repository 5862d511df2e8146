"""Direct Kafka mode: the driver decides each batch's offset ranges.

No receivers, no tracker: the driver keeps the current offsets, asks the brokers for the latest
ones, bounds each partition's advance with :func:`max_messages_per_partition` and builds an RDD
with one partition per Kafka partition whose task reads ``[from, until)`` straight from Kafka.

Importing this package pulls in neither Spark nor Kafka: the maths is pure, and the Spark/Kafka
shell (:class:`DirectKafkaSource`) is loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._exports import lazy_exports
from sluice.kafka.offsets import (
    OffsetRange,
    PerPartitionLimit,
    TopicPartition,
    clamp,
    lag,
    max_messages_per_partition,
    offset_ranges,
)

__all__ = [
    "DirectKafkaSource",
    "OffsetRange",
    "PerPartitionLimit",
    "TopicPartition",
    "clamp",
    "lag",
    "max_messages_per_partition",
    "offset_ranges",
]

if TYPE_CHECKING:
    from sluice.spark_driver.direct.source import DirectKafkaSource
else:  # the Spark/Kafka shell loads only when asked for, so the maths stays importable anywhere
    __getattr__ = lazy_exports(__name__, {"DirectKafkaSource": "sluice.spark_driver.direct.source"})
