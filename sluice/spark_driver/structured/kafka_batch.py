"""``spark.read.format("sluice-kafka")``: a bounded read of Kafka for batch jobs and backfills.

Spark's Kafka batch source: ``startingOffsets`` (default ``earliest``) to ``endingOffsets``
(default ``latest``), or their by-time forms.  The range is fixed when Spark plans the read
(``partitions``, called once on the driver): records produced while the job runs are not read,
and every task reads exactly its ``[from, until)``.  A start past the end is refused, and offsets
no longer in the log fail the read unless ``failOnDataLoss=false`` (then it starts from what the
log holds), as Spark's ``KafkaRelation``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from sluice.spark_driver.structured.kafka_options import KafkaOptions
from sluice.spark_driver.structured.kafka_ranges import (
    RangePartition,
    brokers,
    check_loss,
    range_partitions,
    read_rows,
    resolve,
)
from sluice.spark_driver.structured.options import OptionError


class SluiceKafkaBatchReader(DataSourceReader):
    """The ``sluice-kafka`` batch reader (see the module doc)."""

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options

    def partitions(self) -> list[RangePartition]:
        kafka = brokers(self.options)
        try:
            partitions = kafka.partitions()
            o = self.options
            begin = resolve(kafka, o.starting, partitions, o.timestamp_strategy, "starting")
            until = resolve(kafka, o.ending, partitions, "latest", "ending")
            past = sorted(tp for tp in partitions if begin[tp] > until[tp])
            if past:
                raise OptionError(
                    "the read starts after it ends in "
                    + ", ".join(f"{t}/{p} ({begin[(t, p)]} > {until[(t, p)]})" for t, p in past)
                    + ": give startingOffsets before endingOffsets"
                )
            begin = check_loss(kafka, begin, kafka.latest_offsets(partitions), o.fail_on_data_loss, "sluice-kafka read")
        finally:
            kafka.close()
        return range_partitions(self.options, begin, {tp: e for tp, e in until.items() if e > begin.get(tp, e)})

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_rows(partition)
