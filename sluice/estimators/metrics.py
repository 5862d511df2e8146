"""Prometheus metrics of rate control, created once at import on the estimators' own :data:`REGISTRY`
(:mod:`sluice.exposition` says why not the default one).

The driver serves them on its metrics port next to its own (``sluice.spark_driver.metrics``).  Labels:
``stream`` is the input stream id as a string; ``reason`` is one of
``sluice.estimators.controller.FAILURE_REASONS``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

REGISTRY = CollectorRegistry(auto_describe=True)

ESTIMATED_RATE = Gauge(
    "sluice_estimated_rate",
    "Latest good rate estimate in records/s (what was published)",
    ["stream"],
    registry=REGISTRY,
)
MIN_RATE = Gauge(
    "sluice_estimator_min_rate",
    "The estimator's floor in records/s (its min_rate), for alert rules",
    ["stream"],
    registry=REGISTRY,
)
ESTIMATES = Counter("sluice_rate_estimates", "Rate estimates accepted and published", ["stream"], registry=REGISTRY)
ESTIMATOR_FAILURES = Counter(
    "sluice_estimator_failures",
    "Estimates rejected (estimator raised, or returned NaN/inf/zero/negative/not a number); "
    "the last good rate stayed in force",
    ["stream", "reason"],
    registry=REGISTRY,
)
PUBLISH_FAILURES = Counter(
    "sluice_rate_publish_failures", "Good estimates whose publish callback failed", ["stream"], registry=REGISTRY
)
PID_PROCESSING_RATE = Gauge(
    "sluice_pid_processing_rate",
    "PID: records/s the latest batch was processed at",
    ["stream"],
    registry=REGISTRY,
)
PID_ERROR = Gauge(
    "sluice_pid_error", "PID: latest rate minus processing rate (records/s)", ["stream"], registry=REGISTRY
)
PID_HISTORICAL_ERROR = Gauge(
    "sluice_pid_historical_error",
    "PID: scheduling delay turned into a rate, sched * processing rate / interval (records/s)",
    ["stream"],
    registry=REGISTRY,
)
PID_DERIVATIVE_ERROR = Gauge(
    "sluice_pid_derivative_error",
    "PID: change of the error per second (records/s^2)",
    ["stream"],
    registry=REGISTRY,
)
