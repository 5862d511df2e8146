"""Serve one service's Prometheus metrics, and only its own, from a bounded server.

Each metrics module keeps its collectors on its own ``CollectorRegistry`` rather than
prometheus_client's process-wide default: a receiver imports the tracker's client (and with it
modules that count tracker events) and every service loads the estimator plugins, so on the default
registry each service would also export the others' families, at zero, and a dashboard summing a
family across jobs would count phantom series.  A service serves the registries it owns plus the
process, platform and garbage-collector collectors the default registry would have given it.

prometheus_client's own server starts a thread per connection and never times one out: idle
connections held its threads and file descriptors until a service ran out of them.  This one is
an asyncio server on one thread: at most :data:`MAX_CONNECTIONS` connections (more are closed at
once), each given :data:`DEADLINE_S` seconds to send its request and take the reply.  It binds
loopback unless told otherwise.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from concurrent.futures import Future

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

MAX_CONNECTIONS = 16
DEADLINE_S = 10.0
_MAX_REQUEST = 8192


def service_registry(registries: Iterable[CollectorRegistry]) -> CollectorRegistry:
    """One registry with ``registries`` and the process collectors, as a service exposes it."""
    served = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=served)
    PlatformCollector(registry=served)
    GCCollector(registry=served)
    for registry in registries:
        served.register(registry)
    return served


class MetricsServer:
    """``GET /metrics`` (any path) of one registry, bounded in connections and time."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.open = 0
        self.listener: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= MAX_CONNECTIONS:
            writer.close()
            return
        self.open += 1
        try:
            await asyncio.wait_for(self._answer(reader, writer), DEADLINE_S)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self.open -= 1
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        if not request.startswith(b"GET "):
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        else:
            body = generate_latest(self.registry)
            head = f"HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\nContent-Length: {len(body)}\r\n"
            writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
        await writer.drain()


def serve(port: int, registries: Iterable[CollectorRegistry], addr: str = "127.0.0.1") -> MetricsServer | None:
    """Serve /metrics of ``registries`` on ``addr:port`` from a daemon thread (0: no server).
    Raises OSError when the port cannot be bound, before returning."""
    if not port:
        return None
    server = MetricsServer(service_registry(registries))
    bound: Future[None] = Future()

    def run() -> None:  # its own loop on its own thread: the caller may be inside a running loop
        loop = asyncio.new_event_loop()
        try:
            server.listener = loop.run_until_complete(
                asyncio.start_server(server.handle, addr, port, limit=_MAX_REQUEST)
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            bound.set_exception(exc)
            return
        bound.set_result(None)
        loop.run_forever()

    threading.Thread(target=run, name=f"metrics-{port}", daemon=True).start()
    bound.result()
    return server
