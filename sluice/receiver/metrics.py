"""The receiver workers' Prometheus metrics, created once at import on the receiver's own
:data:`REGISTRY` (:mod:`sluice.exposition` says why not the default one).

Labelled ``stream`` and ``receiver``; each supervisor binds its children once (``ReceiverMetrics``)
so the hot path touches a pre-resolved child, never the label lookup.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sluice import exposition
from sluice.metrics_web_config import WebConfig

REGISTRY = CollectorRegistry(auto_describe=True)

_LABELS = ("stream", "receiver")

RECORDS = Counter("sluice_receiver_records_total", "Records stored into blocks", _LABELS, registry=REGISTRY)
RATE_LIMIT = Gauge(
    "sluice_receiver_rate_limit", "Current rate limit, records/s (+Inf when unlimited)", _LABELS, registry=REGISTRY
)
LIMITER_WAIT = Counter(
    "sluice_receiver_limiter_wait_seconds_total",
    "Time store() spent waiting on the limiter",
    _LABELS,
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "sluice_receiver_block_queue_depth", "Blocks waiting in the queue to be pushed", _LABELS, registry=REGISTRY
)
BLOCKS_HELD = Gauge(
    "sluice_receiver_blocks_held",
    "Blocks generated and not yet acknowledged by the tracker",
    _LABELS,
    registry=REGISTRY,
)
BLOCKS_PUSHED = Counter(
    "sluice_receiver_blocks_pushed_total", "Blocks stored and acknowledged by the tracker", _LABELS, registry=REGISTRY
)
PUSH_SECONDS = Histogram(
    "sluice_receiver_push_seconds",
    "Store + fsync + tracker acknowledgement of one block",
    _LABELS,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    registry=REGISTRY,
)
ERRORS = Counter(
    "sluice_receiver_errors_total",
    "Errors reported (push retries, receiver failures)",
    (*_LABELS, "kind"),
    registry=REGISTRY,
)
BLOCKS_REFUSED = Counter(
    "sluice_receiver_blocks_refused_total",
    "Blocks the tracker recorded without some of their records, which it held already (duplicate: none; "
    "trimmed: part); their source offsets are committed all the same",
    (*_LABELS, "reason"),
    registry=REGISTRY,
)
RESTARTS = Counter("sluice_receiver_restarts_total", "Receiver restarts after an error", _LABELS, registry=REGISTRY)
KAFKA_LAG = Gauge(
    "sluice_receiver_kafka_lag_records",
    "Records behind the partition's high watermark (under read_committed, its last stable offset)",
    (*_LABELS, "topic", "partition"),
    registry=REGISTRY,
)
OPEN_TRANSACTION_RECORDS = Gauge(
    "sluice_receiver_kafka_open_transaction_records",
    "Records between the partition's last stable offset and its high watermark (read_committed only): "
    "held back by transactions still open",
    (*_LABELS, "topic", "partition"),
    registry=REGISTRY,
)
COMMITS = Counter(
    "sluice_receiver_kafka_commits_total",
    "Offset commits after acknowledged blocks, by outcome",
    (*_LABELS, "outcome"),
    registry=REGISTRY,
)


class ReceiverMetrics:
    """The metric children of one receiver."""

    def __init__(self, stream_id: int, receiver_id: str) -> None:
        labels = (str(stream_id), receiver_id)
        self.labels = labels
        self.records = RECORDS.labels(*labels)
        self.rate_limit = RATE_LIMIT.labels(*labels)
        self.limiter_wait = LIMITER_WAIT.labels(*labels)
        self.queue_depth = QUEUE_DEPTH.labels(*labels)
        self.blocks_held = BLOCKS_HELD.labels(*labels)
        self.blocks_pushed = BLOCKS_PUSHED.labels(*labels)
        self.push_seconds = PUSH_SECONDS.labels(*labels)
        self.restarts = RESTARTS.labels(*labels)

    def error(self, kind: str) -> None:
        ERRORS.labels(*self.labels, kind).inc()

    def refused(self, reason: str) -> None:
        BLOCKS_REFUSED.labels(*self.labels, reason).inc()

    def lag(self, topic: str, partition: int, records: int) -> None:
        KAFKA_LAG.labels(*self.labels, topic, str(partition)).set(records)

    def open_transaction_records(self, topic: str, partition: int, records: int) -> None:
        OPEN_TRANSACTION_RECORDS.labels(*self.labels, topic, str(partition)).set(records)

    def commit(self, outcome: str) -> None:
        COMMITS.labels(*self.labels, outcome).inc()


def serve(port: int, addr: str = "127.0.0.1", web: WebConfig | None = None) -> None:
    """Serve the receiver's /metrics on ``port``, with the TLS and users of ``web`` (0: do nothing)."""
    exposition.serve(port, [REGISTRY], addr, web)
