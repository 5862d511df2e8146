"""Prometheus metrics of direct Kafka mode, created once at import on the driver's registry.

Per partition, because skew is the point of lag-weighted backpressure: an operator needs to see
which partition is behind and how much of it each batch takes.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from sluice.spark_driver.metrics import REGISTRY

PARTITION_LAG = Gauge(
    "sluice_direct_partition_lag",
    "Records of a partition not yet in any batch, after the latest batch took its range (up to the last "
    "stable offset under read_committed)",
    ["topic", "partition"],
    registry=REGISTRY,
)
OPEN_TRANSACTION_RECORDS = Gauge(
    "sluice_direct_open_transaction_records",
    "Records of a partition between its last stable offset and its high watermark when the latest batch "
    "was planned (read_committed only): held back by transactions still open",
    ["topic", "partition"],
    registry=REGISTRY,
)
RANGE_RECORDS = Gauge(
    "sluice_direct_range_records",
    "Records in the latest batch's offset range of a partition",
    ["topic", "partition"],
    registry=REGISTRY,
)
OFFSET_REQUEST_FAILURES = Counter(
    "sluice_direct_offset_request_failures_total",
    "Batches that failed because the brokers did not give the latest offsets after the retries",
    registry=REGISTRY,
)
COMMIT_FAILURES = Counter(
    "sluice_direct_commit_failures_total",
    "Offset commits to the consumer group that failed (the checkpoint still holds the offsets)",
    registry=REGISTRY,
)
