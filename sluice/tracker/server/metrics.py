"""The tracker's Prometheus metrics, created once at import on the tracker's own registry
(:data:`sluice.tracker.log.metrics.REGISTRY`; :mod:`sluice.exposition` says why not the default one).

Queue sizes and live receivers are read from the running service when Prometheus scrapes (a
custom collector), so the hot path of ``add_block`` pays nothing for them; counters and the fsync
histogram are updated where the thing happens.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sluice import exposition
from sluice.metrics_web_config import WebConfig
from sluice.tracker.log.metrics import REGISTRY

REQUESTS = Counter(
    "sluice_tracker_requests_total", "RPC requests by op and outcome", ["op", "outcome"], registry=REGISTRY
)
BAD_FRAMES = Counter("sluice_tracker_bad_frames_total", "Frames refused, by reason", ["reason"], registry=REGISTRY)
RECEIVERS_DEAD = Counter(
    "sluice_tracker_receivers_dead_total",
    "Receivers marked dead by the liveness timeout",
    ["stream"],
    registry=REGISTRY,
)
BLOCKS_DROPPED = Counter(
    "sluice_tracker_duplicate_blocks_total",
    "Blocks whose offsets were all added before (dropped) or partly (trimmed)",
    ["stream", "action"],
    registry=REGISTRY,
)

LOCATIONS_REFUSED = Counter(
    "sluice_tracker_locations_refused_total",
    "Block locations refused (outside the block store or not a block's shape)",
    ["where"],
    registry=REGISTRY,
)
CONNECTIONS_CLOSED = Counter(
    "sluice_tracker_connections_closed_total",
    "Connections the tracker closed, by reason (max_connections, hello_timeout, idle, bad_frames, bad_before_hello)",
    ["reason"],
    registry=REGISTRY,
)
ERROR_REPORTS = Counter(
    "sluice_tracker_error_reports_total",
    "report_error requests by outcome (logged; suppressed: over the receiver's log budget; not_held)",
    ["outcome"],
    registry=REGISTRY,
)
ACCEPT_ERRORS = Counter(
    "sluice_tracker_accept_errors_total", "Failed accepts (out of file descriptors)", registry=REGISTRY
)


class _Queues(Protocol):
    def unallocated_counts(self) -> Mapping[int, tuple[int, int]]: ...
    def pending_batches(self) -> list[int]: ...


class _Liveness(Protocol):
    def live_counts(self) -> Mapping[int, int]: ...


class _Skipped(Protocol):
    @property
    def reasons(self) -> Mapping[tuple[int, str], str]: ...


class Watched(Protocol):
    """What the gauges read of a tracker service (the service imports this module, so it is
    stated here, not imported)."""

    @property
    def tracker(self) -> _Queues: ...
    @property
    def registry(self) -> _Liveness: ...
    @property
    def skips(self) -> _Skipped: ...
    def stream_lags(self) -> Mapping[int, float]: ...


_source: Callable[[], Watched | None] | None = None


def forget_stream(stream_id: int) -> None:
    """Remove a forgotten stream's label sets, so streams that come and go do not pile up series."""
    stream = str(stream_id)
    for counter, extra in ((RECEIVERS_DEAD, ((),)), (BLOCKS_DROPPED, (("dropped",), ("trimmed",)))):
        for rest in extra:
            try:
                counter.remove(stream, *rest)
            except KeyError:
                pass  # never counted for this stream


def watch(service: Watched) -> None:
    """Make the gauges report ``service`` (the most recently started one in this process)."""
    global _source
    _source = weakref.ref(service)


class _StateCollector(Collector):
    def collect(self) -> Iterable[GaugeMetricFamily]:
        blocks = GaugeMetricFamily("sluice_tracker_unallocated_blocks", "Blocks waiting for a batch", labels=["stream"])
        records = GaugeMetricFamily(
            "sluice_tracker_unallocated_records", "Records in blocks waiting for a batch", labels=["stream"]
        )
        live = GaugeMetricFamily(
            "sluice_tracker_receivers_live", "Receivers heard from within the liveness timeout", labels=["stream"]
        )
        pending = GaugeMetricFamily("sluice_tracker_pending_batches", "Batches allocated and not completed")
        skipped = GaugeMetricFamily(
            "sluice_tracker_blocks_skipped",
            "Blocks an operator skipped, until their batch is cleaned up",
            labels=["stream"],
        )
        lag = GaugeMetricFamily(
            "sluice_stream_lag_seconds",
            "Age of the stream's oldest unprocessed record by its Kafka timestamp (an upper bound while "
            "the backlog waits in Kafka)",
            labels=["stream"],
        )
        service = _source() if _source is not None else None
        if service is not None:
            for stream, (n_blocks, n_records) in service.tracker.unallocated_counts().items():
                blocks.add_metric([str(stream)], n_blocks)
                records.add_metric([str(stream)], n_records)
            for stream, n in service.registry.live_counts().items():
                live.add_metric([str(stream)], n)
            pending.add_metric([], len(service.tracker.pending_batches()))
            by_stream: dict[int, int] = {}
            for stream, _ in service.skips.reasons:
                by_stream[stream] = by_stream.get(stream, 0) + 1
            for stream, n in by_stream.items():
                skipped.add_metric([str(stream)], n)
            for stream, seconds in service.stream_lags().items():
                lag.add_metric([str(stream)], seconds)
        yield from (blocks, records, live, pending, skipped, lag)


REGISTRY.register(_StateCollector())


def serve(port: int, addr: str = "127.0.0.1", web: WebConfig | None = None) -> None:
    """Serve the tracker's /metrics on ``port``, with the TLS and users of ``web`` (0: no server)."""
    exposition.serve(port, [REGISTRY], addr, web)


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    """A metric's current value in this process (0 when absent); for tests and the bench."""
    value = REGISTRY.get_sample_value(name, labels or {})
    return 0.0 if value is None else value
