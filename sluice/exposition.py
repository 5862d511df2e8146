"""Serve one service's Prometheus metrics, and only its own, from a bounded server.

Each metrics module keeps its collectors on its own ``CollectorRegistry`` rather than
prometheus_client's process-wide default: a receiver imports the tracker's client (and with it
modules that count tracker events) and every service loads the estimator plugins, so on the default
registry each service would also export the others' families, at zero, and a dashboard summing a
family across jobs would count phantom series.  A service serves the registries it owns plus the
process, platform and garbage-collector collectors the default registry would have given it.

prometheus_client's own server starts a thread per connection and never times one out: idle
connections held its threads and file descriptors until a service ran out of them.  This one is
an asyncio server on one thread, each connection given :data:`DEADLINE_S` seconds to send its
request and take the reply, a TLS handshake included, and at most :data:`MAX_CONNECTIONS` open.  At
the cap a new connection closes the oldest one still sending its request (idle, trickling bytes or
stalled in its handshake), as the tracker does with connections before hello: a scraper sends its
request at once, so sockets opened and left idle never keep it out.  Only when every connection is
past its request (being answered, for at most the deadline) is a new one closed at once.  It binds
loopback unless told otherwise; across a network, a web configuration file
(:mod:`sluice.metrics_web_config`) adds TLS and basic auth, whose rounds are bounded by
:mod:`sluice.metrics_auth` and :data:`MAX_WAITING_ROUNDS` here.  Whatever a request does, it costs no
traceback: refusals and failures are counted and logged at a bounded rate (:class:`Refusals`).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from sluice.metrics_auth import MAX_PASSWORD_BYTES, BasicAuth, Credentials, PeerLimiter, parse
from sluice.metrics_web_config import WebConfig

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 16
DEADLINE_S = 10.0
LOG_EVERY_S = 60.0
MAX_WAITING_ROUNDS = 4  # bcrypt rounds queued or running at once, whatever the client addresses
_MAX_REQUEST = 8192
_UNAUTHORIZED = (
    b'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm="sluice"\r\n'
    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
)
_TOO_MANY = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_NOT_ALLOWED = b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


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
    """Connections refused or closed early (a failed TLS handshake, bad credentials, too many failed
    logins, an idle connection closed for a new one, a request that failed), by reason: counted,
    and logged at most once per :data:`LOG_EVERY_S` so a scanner or a misconfigured scraper cannot
    fill the log.  Never the credentials themselves."""

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


class _Connection(asyncio.StreamReaderProtocol):
    """One connection's protocol.  It notes when the whole request has arrived, as the bytes come
    in and not when the handler gets to them: a scraper whose request waits in the stream for the
    loop is not one to close for a new connection.  With TLS it reads nothing until the handler
    starts TLS: bytes read into the stream before ``start_tls`` would be lost to the handshake,
    which would then wait out the deadline."""

    def __init__(self, reader: asyncio.StreamReader, handler: Callable[..., Any], *, paused: bool) -> None:
        super().__init__(reader, handler)
        self.paused = paused
        self.request_in = False
        self._tail = b""  # the last bytes seen, for an end of headers split across reads

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.paused:
            transport.pause_reading()  # type: ignore[attr-defined]
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.request_in:
            seen = self._tail + data
            self.request_in, self._tail = b"\r\n\r\n" in seen, seen[-3:]
        super().data_received(data)


class MetricsServer:
    """``GET /metrics`` (any path) of one registry, bounded in connections and time, with the TLS
    and users of ``web`` when given."""

    def __init__(self, registry: CollectorRegistry, web: WebConfig | None = None) -> None:
        self.registry = registry
        self.listener: asyncio.Server | None = None
        self.tls = web.tls if web else None
        self.auth = BasicAuth(web.users) if web and web.users else None
        # bcrypt rounds off the event loop (which keeps timing out the other connections), on one
        # thread whatever the connections
        self._checker = ThreadPoolExecutor(1, "metrics-auth") if self.auth else None
        self.limiter = PeerLimiter()
        self.refusals = Refusals()
        self._rounds_waiting = 0
        self._connections: dict[asyncio.Task[None], _Connection] = {}  # by handler, oldest first

    @property
    def open(self) -> int:
        """Connections open now."""
        return len(self._connections)

    def protocol(self) -> asyncio.StreamReaderProtocol:
        """One connection's protocol, created as it is accepted."""
        return _Connection(asyncio.StreamReader(limit=_MAX_REQUEST), self.handle, paused=self.tls is not None)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # a handler runs as its connection's task
        if len(self._connections) >= MAX_CONNECTIONS and not self._close_oldest_idle():
            self.refusals.add("connections over the cap")
            writer.close()
            return
        self._connections[task] = cast(_Connection, writer.transport.get_protocol())
        try:
            await asyncio.wait_for(self._answer(reader, writer), DEADLINE_S)
        except ssl.SSLError:  # not TLS (plain HTTP on a TLS port), an old version, a missing client certificate
            self.refusals.add("failed TLS handshakes")
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except Exception as exc:  # noqa: BLE001 - a peer must not turn a fault into a traceback per request
            self.refusals.add(f"failed requests ({type(exc).__name__})")
        finally:
            self._connections.pop(task, None)
            writer.close()

    def _close_oldest_idle(self) -> bool:
        """Close the oldest connection still sending its request, for a new one; False when none is."""
        oldest = next((task for task, conn in self._connections.items() if not conn.request_in), None)
        if oldest is None:
            return False
        del self._connections[oldest]
        oldest.cancel()  # its handler closes it
        self.refusals.add("idle connections closed for new ones")
        return True

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.tls is not None:
            await writer.start_tls(self.tls)
        request = await reader.readuntil(b"\r\n\r\n")
        peer = writer.get_extra_info("peername")
        refused = await self._authenticate(self.auth, request, str(peer[0]) if peer else "") if self.auth else None
        if refused is not None:
            writer.write(refused)
        elif not request.startswith(b"GET "):
            writer.write(_NOT_ALLOWED)
        else:
            body = generate_latest(self.registry)
            head = f"HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\nContent-Length: {len(body)}\r\n"
            writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
        await writer.drain()

    async def _authenticate(self, auth: BasicAuth, request: bytes, peer: str) -> bytes | None:
        """None when the request's credentials are allowed, else the reply that refuses it.

        Remembered credentials cost no round; others run one only while ``peer`` has failures left
        (:class:`~sluice.metrics_auth.PeerLimiter`) and fewer than :data:`MAX_WAITING_ROUNDS` wait,
        else get 429 at once."""
        credentials = parse(_authorization(request))
        if credentials is not None and auth.remembered(credentials):
            return None
        if credentials is not None and len(credentials.password) <= MAX_PASSWORD_BYTES:  # else no round: 401
            if self._rounds_waiting >= MAX_WAITING_ROUNDS or not self.limiter.take(peer):
                self.refusals.add("failed logins over the rate limit")
                return _TOO_MANY
            if await self._round(auth, credentials):
                self.limiter.give_back(peer)
                return None
        self.refusals.add("bad or missing credentials")
        return _UNAUTHORIZED

    async def _round(self, auth: BasicAuth, credentials: Credentials) -> bool:
        """A bcrypt round on the checker thread, counted as waiting until the thread is done with it
        (a connection timed out while waiting does not stop a round already running)."""
        loop, checker = asyncio.get_running_loop(), self._checker
        assert checker is not None  # there is one whenever there are users
        self._rounds_waiting += 1

        def done(_: Future[bool]) -> None:
            loop.call_soon_threadsafe(self._round_done)

        future = checker.submit(auth.verify, credentials)
        future.add_done_callback(done)
        return await asyncio.wrap_future(future)

    def _round_done(self) -> None:
        self._rounds_waiting -= 1


def _authorization(request: bytes) -> bytes | None:
    """The value of a request's ``Authorization`` header, or None."""
    return next(
        (line.partition(b":")[2] for line in request.split(b"\r\n")[1:] if line.lower().startswith(b"authorization:")),
        None,
    )


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
