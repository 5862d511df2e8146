"""Serve one service's Prometheus metrics, and only its own.

Each metrics module keeps its collectors on its own ``CollectorRegistry`` rather than
prometheus_client's process-wide default: a receiver imports the tracker's client (and with it
modules that count tracker events) and every service loads the estimator plugins, so on the default
registry each service would also export the others' families, at zero, and a dashboard summing a
family across jobs would count phantom series.  A service serves the registries it owns plus the
process, platform and garbage-collector collectors the default registry would have given it.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, start_http_server


def service_registry(registries: Iterable[CollectorRegistry]) -> CollectorRegistry:
    """One registry with ``registries`` and the process collectors, as a service exposes it."""
    served = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=served)
    PlatformCollector(registry=served)
    GCCollector(registry=served)
    for registry in registries:
        served.register(registry)
    return served


def serve(port: int, registries: Iterable[CollectorRegistry], addr: str = "0.0.0.0") -> None:
    """Serve /metrics of ``registries`` on ``port`` (0: no server)."""
    if port:
        start_http_server(port, addr=addr, registry=service_registry(registries))
