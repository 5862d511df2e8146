"""The driver's Prometheus metrics, created once at import on the driver's own :data:`REGISTRY`
(:mod:`sluice.exposition` says why not the default one).

Batch timing follows Spark's ``BatchInfo``: scheduling delay is the time a batch waited for a job
thread (it grows when batches arrive faster than they finish, the thing backpressure prevents),
processing time is the user's function, total delay their sum.  The estimator's gauges
(``sluice_estimated_rate``, PID terms) live in ``sluice.estimators.metrics`` on the estimators'
registry; the driver serves both (direct mode's metrics are on this registry).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sluice import exposition
from sluice.estimators import metrics as estimator_metrics
from sluice.metrics_web_config import WebConfig

REGISTRY = CollectorRegistry(auto_describe=True)

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

BATCH_PROCESSING = Histogram(
    "sluice_batch_processing_seconds",
    "Time the batch function ran (processing end - start)",
    buckets=_SECONDS,
    registry=REGISTRY,
)
BATCH_SCHEDULING_DELAY = Histogram(
    "sluice_batch_scheduling_delay_seconds",
    "Time a batch waited for a job thread (start - submission)",
    buckets=(0.0, *_SECONDS),
    registry=REGISTRY,
)
BATCH_TOTAL_DELAY = Histogram(
    "sluice_batch_total_delay_seconds",
    "Scheduling delay plus processing time",
    buckets=_SECONDS,
    registry=REGISTRY,
)
BATCH_STAGE = Histogram(
    "sluice_batch_stage_seconds",
    "Time a record spent in each stage of its way, from the broker's append to the batch function's end "
    "(two samples a block: its first and last records; stages as sluice.stages names them)",
    ["stage"],
    buckets=(0.0, 0.001, *_SECONDS),
    registry=REGISTRY,
)
BATCH_RECORDS = Gauge("sluice_batch_records", "Records in the last completed batch", registry=REGISTRY)
RECORDS_PROCESSED = Counter(
    "sluice_batch_processed_records", "Records of the batches that completed successfully", registry=REGISTRY
)
BATCHES_PENDING = Gauge("sluice_batches_pending", "Batches submitted and not yet completed", registry=REGISTRY)
BATCHES_COMPLETED = Counter("sluice_batches_completed", "Batches that completed successfully", registry=REGISTRY)
BATCHES_FAILED = Counter("sluice_batches_failed", "Batches that failed after all retries", registry=REGISTRY)
BATCH_RETRIES = Counter("sluice_batch_retries", "Batch attempts that failed and were retried", registry=REGISTRY)
BATCH_CREATE_FAILURES = Counter(
    "sluice_batch_create_failures",
    "Ticks whose batch could not be created (tracker or broker unreachable)",
    registry=REGISTRY,
)
FALLING_BEHIND = Counter(
    "sluice_falling_behind",
    "Batches that ran longer than the trigger interval (processing-time trigger)",
    registry=REGISTRY,
)
BLOCKS_REFUSED = Counter(
    "sluice_blocks_refused",
    "Blocks whose location the driver refused (outside driver.block_store or not a block's "
    "shape): never read, never deleted",
    ["action"],
    registry=REGISTRY,
)
BAD_RECORDS = Counter(
    "sluice_bad_records",
    "Kafka records that could not be decoded and were left out of their batch, by driver.bad_records "
    "(skip or dead-letter); counted when the batch completes",
    ["policy"],
    registry=REGISTRY,
)
KAFKA_SINK_TRANSACTIONS = Counter(
    "sluice_kafka_sink_transactions",
    "Batch.write_kafka's task transactions, by outcome (committed or aborted); counted when the batch's tasks return",
    ["outcome"],
    registry=REGISTRY,
)
KAFKA_SINK_COMMIT_SECONDS = Histogram(
    "sluice_kafka_sink_transaction_seconds",
    "Time of a committed Batch.write_kafka transaction, from its begin to its commit's answer",
    buckets=_SECONDS,
    registry=REGISTRY,
)
KAFKA_SINK_ALREADY_WRITTEN = Counter(
    "sluice_kafka_sink_already_written_tasks",
    "Batch.write_kafka tasks that found their output already committed (a re-run batch) and wrote nothing",
    registry=REGISTRY,
)
KAFKA_SINK_RERUN_BATCHES = Counter(
    "sluice_kafka_sink_rerun_batches",
    "Batches whose Batch.write_kafka found part or all of their output already committed",
    registry=REGISTRY,
)
RATE_PUBLISHED = Gauge("sluice_driver_published_rate", "Last rate the driver published", ["stream"], registry=REGISTRY)


def observe_stages(samples: Mapping[str, Sequence[float]]) -> None:
    """Observe a batch's stage samples (milliseconds) in :data:`BATCH_STAGE`."""
    for stage, values in samples.items():
        child = BATCH_STAGE.labels(stage)
        for value in values:
            child.observe(max(0.0, value) / 1000.0)


def serve(port: int, addr: str = "127.0.0.1", web: WebConfig | None = None) -> None:
    """Serve the driver's and its estimators' /metrics on ``port``, with the TLS and users of ``web`` (0: no server)."""

    exposition.serve(port, [REGISTRY, estimator_metrics.REGISTRY], addr, web)
