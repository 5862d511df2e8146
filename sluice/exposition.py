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
once), each given :data:`DEADLINE_S` seconds to send its request and take the reply, a TLS handshake
included.  It binds loopback unless told otherwise; across a network, a web configuration file
(:mod:`sluice.metrics_web_config`) adds TLS and basic auth.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from sluice.metrics_web_config import BasicAuth, WebConfig

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 16
DEADLINE_S = 10.0
LOG_EVERY_S = 60.0
_MAX_REQUEST = 8192
_UNAUTHORIZED = (
    b'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm="sluice"\r\n'
    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
)


def service_registry(registries: Iterable[CollectorRegistry]) -> CollectorRegistry:
    """One registry with ``registries`` and the process collectors, as a service exposes it."""
    served = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=served)
    PlatformCollector(registry=served)
    GCCollector(registry=served)
    for registry in registries:
        served.register(registry)
    return served


class Refusals:
    """Connections refused for a failed TLS handshake or bad credentials, by reason: counted, and
    logged at most once per :data:`LOG_EVERY_S` so a scanner or a misconfigured scraper cannot fill
    the log.  Never the credentials themselves."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._unlogged: Counter[str] = Counter()
        self._logged_at = float("-inf")

    def add(self, reason: str) -> None:
        self.counts[reason] += 1
        self._unlogged[reason] += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            said = ", ".join(f"{n} {why}" for why, n in sorted(self._unlogged.items()))
            log.warning("metrics endpoint refused connections since the last report: %s", said)
            self._unlogged.clear()


class _PausedProtocol(asyncio.StreamReaderProtocol):
    """Reads nothing until the handler starts TLS: bytes read into the stream before ``start_tls``
    would be lost to the handshake, which would then wait out the deadline."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.pause_reading()  # type: ignore[attr-defined]
        super().connection_made(transport)


class MetricsServer:
    """``GET /metrics`` (any path) of one registry, bounded in connections and time, with the TLS
    and users of ``web`` when given."""

    def __init__(self, registry: CollectorRegistry, web: WebConfig | None = None) -> None:
        self.registry = registry
        self.open = 0
        self.listener: asyncio.Server | None = None
        self.tls = web.tls if web else None
        self.auth = BasicAuth(web.users) if web and web.users else None
        # bcrypt rounds off the event loop (which keeps timing out the other connections), on one
        # thread whatever the connections
        self._checker = ThreadPoolExecutor(1, "metrics-auth") if self.auth else None
        self.refusals = Refusals()

    def protocol(self) -> asyncio.StreamReaderProtocol:
        """One connection's protocol, created as it is accepted."""
        reader = asyncio.StreamReader(limit=_MAX_REQUEST)
        kind = _PausedProtocol if self.tls else asyncio.StreamReaderProtocol
        return kind(reader, self.handle)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= MAX_CONNECTIONS:
            writer.close()
            return
        self.open += 1
        try:
            await asyncio.wait_for(self._answer(reader, writer), DEADLINE_S)
        except ssl.SSLError:  # not TLS (plain HTTP on a TLS port), an old version, a missing client certificate
            self.refusals.add("failed TLS handshakes")
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self.open -= 1
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.tls is not None:
            await writer.start_tls(self.tls)
        request = await reader.readuntil(b"\r\n\r\n")
        if self.auth is not None and not await self._allowed(self.auth, request):
            self.refusals.add("bad or missing credentials")
            writer.write(_UNAUTHORIZED)
        elif not request.startswith(b"GET "):
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        else:
            body = generate_latest(self.registry)
            head = f"HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\nContent-Length: {len(body)}\r\n"
            writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
        await writer.drain()

    async def _allowed(self, auth: BasicAuth, request: bytes) -> bool:
        header = next(
            (
                line.partition(b":")[2]
                for line in request.split(b"\r\n")[1:]
                if line.lower().startswith(b"authorization:")
            ),
            None,
        )
        return await asyncio.get_running_loop().run_in_executor(self._checker, auth.allows, header)


def serve(
    port: int, registries: Iterable[CollectorRegistry], addr: str = "127.0.0.1", web: WebConfig | None = None
) -> MetricsServer | None:
    """Serve /metrics of ``registries`` on ``addr:port`` from a daemon thread (0: no server), with
    the TLS and basic auth of ``web`` when given.  Raises OSError when the port cannot be bound,
    before returning."""
    if not port:
        return None
    server = MetricsServer(service_registry(registries), web)
    bound: Future[None] = Future()

    def run() -> None:  # its own loop on its own thread: the caller may be inside a running loop
        loop = asyncio.new_event_loop()
        try:
            server.listener = loop.run_until_complete(loop.create_server(server.protocol, addr, port))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            bound.set_exception(exc)
            return
        bound.set_result(None)
        loop.run_forever()

    threading.Thread(target=run, name=f"metrics-{port}", daemon=True).start()
    bound.result()
    return server
