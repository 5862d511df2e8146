"""The metric names the deploy files may use, and the ones the services actually expose.

Alerts and dashboards that name a metric nobody exports fail silently (an empty panel, an alert
that can never fire), so the deploy tests check every ``sluice_*`` name in them against this list.
``REQUIRED`` is what the tracker, receiver and driver issues promise; ``exported()`` reads what
the services' metrics modules really register, so a renamed metric is caught too.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

# family name -> type, as the issues name them (counters without the _total suffix).
REQUIRED: dict[str, dict[str, str]] = {
    "tracker": {
        "sluice_tracker_unallocated_blocks": "gauge",
        "sluice_tracker_unallocated_records": "gauge",
        "sluice_tracker_receivers_live": "gauge",
        "sluice_tracker_wal_fsync_seconds": "histogram",
        "sluice_tracker_requests": "counter",
        "sluice_stream_lag_seconds": "gauge",
    },
    "receiver": {
        "sluice_receiver_records": "counter",
        "sluice_receiver_rate_limit": "gauge",
        "sluice_receiver_limiter_wait_seconds": "counter",
        "sluice_receiver_block_queue_depth": "gauge",
        "sluice_receiver_blocks_pushed": "counter",
        "sluice_receiver_push_seconds": "histogram",
    },
    "driver": {
        "sluice_batch_processing_seconds": "histogram",
        "sluice_batch_scheduling_delay_seconds": "histogram",
        "sluice_batch_total_delay_seconds": "histogram",
        "sluice_batch_records": "gauge",
        "sluice_batch_processed_records": "counter",
        "sluice_batches_pending": "gauge",
        "sluice_batches_completed": "counter",
        "sluice_batches_failed": "counter",
        "sluice_falling_behind": "counter",
    },
    "estimator": {
        "sluice_estimated_rate": "gauge",
        "sluice_estimator_min_rate": "gauge",
        "sluice_pid_processing_rate": "gauge",
        "sluice_pid_error": "gauge",
        "sluice_pid_historical_error": "gauge",
        "sluice_estimator_failures": "counter",
    },
}

# Where each service defines its metrics (a metrics.py per package).
METRICS_MODULES: dict[str, str] = {
    "tracker": "sluice.tracker.server.metrics",
    "receiver": "sluice.receiver.metrics",
    "driver": "sluice.spark_driver.metrics",
    "estimator": "sluice.estimators.metrics",
}

_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
    "gauge": ("",),
    "info": ("_info",),
    "unknown": ("",),
}


def sample_names(families: dict[str, str]) -> set[str]:
    """The series names Prometheus stores for metric families of the given types."""
    names: set[str] = set()
    for family, kind in families.items():
        names.update(family + suffix for suffix in _SUFFIXES.get(kind, ("",)))
    return names


# What each service runs: importing it registers every family the running service can serve, also
# those defined beside the code that sets them (the tracker's standby gauges), not only in metrics.py.
ENTRY_MODULES: dict[str, str] = {
    "tracker": "sluice.tracker.server.cli",
    "receiver": "sluice.receiver.cli",
    "driver": "sluice.spark_driver.cli",
    "estimator": "sluice.estimators",
}


def exported(service: str) -> dict[str, str]:
    """Families the service registers on its metrics module's registry, with the service's code
    loaded, whatever the tests before this one imported."""
    importlib.import_module(ENTRY_MODULES[service])
    registry = importlib.import_module(METRICS_MODULES[service]).REGISTRY
    families: dict[str, str] = {}
    for collector in list(registry._collector_to_names):  # describe() needs no samples
        describe = getattr(collector, "describe", None) or collector.collect
        for metric in describe():
            families[metric.name] = metric.type
    return families


def served(service: str) -> dict[str, str]:
    """Families a running service serves: its own, and for the driver its estimators' too."""
    if service == "driver":
        return {**exported("driver"), **exported("estimator")}
    return exported(service)


def known_series_names() -> set[str]:
    """Every series name a deploy file may use: what the issues promise plus what is exported."""
    names = set()
    for service, families in REQUIRED.items():
        names |= sample_names(families)
        names |= sample_names(exported(service))
    return names


_METRIC = re.compile(r"\bsluice_[a-z0-9_]+")


def names_used(path: Path) -> set[str]:
    """``sluice_*`` series names in a rules file or dashboard (recording rules ``sluice:`` excluded)."""
    return set(_METRIC.findall(path.read_text()))
