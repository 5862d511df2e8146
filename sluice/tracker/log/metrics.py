"""The tracker's Prometheus registry and the log's own metrics (fsync time, events per group commit).

The registry lives on the log's floor, the lowest that records into it, so the log needs nothing of
the server above it; the server's metrics (:mod:`sluice.tracker.server.metrics`) join the same
registry, and one endpoint serves both.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

WAL_FSYNC_SECONDS = Histogram(
    "sluice_tracker_wal_fsync_seconds",
    "Time to write and fsync one WAL group commit",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
    registry=REGISTRY,
)
WAL_GROUP_EVENTS = Histogram(
    "sluice_tracker_wal_group_events",
    "Events made durable by one group commit (one fsync)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096),
    registry=REGISTRY,
)
