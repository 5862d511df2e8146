"""The streaming page's HTTP: bounded ``GET`` requests on one asyncio loop in one daemon thread.

A PySpark driver has no event loop of its own to serve from (its main thread waits for the stop,
its job threads block in Py4J calls until Spark answers), so the page gets one thread, and an
asyncio loop in it serves every connection at once: a client that stalls holds a socket, never
the thread.  What a client can hold is bounded by :class:`Limits`: each connection has one
deadline for the whole exchange (reading the request head, answering, writing the reply), so a
client that sends a byte now and then, or reads the reply slowly, is cut off when it runs out; a
connection past ``max_connections`` is answered 503 at once and closed (as many again at most, each
for :data:`LINGER_S`; past that a connection is reset); the request line and the head have size
limits (414, 431).  Every reply closes its connection (``Connection: close``): the
page asks a few small things a second, keep-alive would only let idle sockets pile up.

The handler is synchronous and runs on a small pool of threads (:data:`WORKERS`), not on the
loop: most replies come from memory in bounded time (the API's page sizes bound the work), but one
that needs the tracker's status may wait on the tracker for a second, and that wait must not stop
the loop reading, answering others and cutting off clients past their deadline.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus

from sluice.errors import SluiceError

log = logging.getLogger(__name__)

WORKERS = 4  # threads computing replies; more requests wait for one, within their deadline
LINGER_S = 1.0  # a refused client's reads are drained this long, so the refusal is not reset away


@dataclass(frozen=True)
class Limits:
    """What one client may take of the page.

    :param deadline_s: the whole exchange of one connection, header read included.
    :param max_connections: connections served at once; more are answered 503 and closed.
    :param max_line: bytes of the request line (longer: 414).
    :param max_head: bytes of the request line and headers together (more: 431).
    :param max_headers: header lines (more: 431).
    """

    deadline_s: float = 10.0
    max_connections: int = 64
    max_line: int = 8192
    max_head: int = 16384
    max_headers: int = 64


@dataclass(frozen=True)
class Request:
    """A parsed request head: ``headers`` are keyed by lower-cased name (the first of repeats)."""

    method: str
    target: str
    version: str
    headers: Mapping[str, str]


@dataclass(frozen=True)
class Reply:
    status: HTTPStatus
    body: bytes
    content_type: str
    headers: Mapping[str, str] = field(default_factory=dict)


class HeadError(SluiceError, ValueError):
    """A request head that is refused with its status (malformed or too large); becomes the reply."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_head(reader: asyncio.StreamReader, limits: Limits) -> Request:
    """The request head, line by line within its bounds; :class:`HeadError` when it is malformed or
    too large.  The reader's limit is ``max_line``: no line is buffered past it."""
    lines: list[str] = []
    size = 0
    while True:
        try:
            raw = await reader.readuntil(b"\r\n")
        except asyncio.LimitOverrunError:
            if not lines:
                raise HeadError(HTTPStatus.REQUEST_URI_TOO_LONG, f"the request line is over {limits.max_line} bytes")
            raise HeadError(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"a header line is over {limits.max_line} bytes"
            )
        size += len(raw)
        if raw == b"\r\n" and lines:
            return parse_head(lines)
        if size > limits.max_head or len(lines) > limits.max_headers:
            raise HeadError(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"the request head is over {limits.max_head} bytes or {limits.max_headers} header lines",
            )
        if raw != b"\r\n":  # a blank line before the request line is skipped, as RFC 9112 allows
            lines.append(raw[:-2].decode("latin-1"))


def parse_head(lines: list[str]) -> Request:
    """The request of a head's lines (the request line, then the headers)."""
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HeadError(HTTPStatus.BAD_REQUEST, "expected a request line 'GET /path HTTP/1.1'")
    headers: dict[str, str] = {}
    for text in lines[1:]:
        name, sep, value = text.partition(":")
        if not sep or not name or name != name.strip():
            raise HeadError(HTTPStatus.BAD_REQUEST, "expected header lines 'Name: value'")
        headers.setdefault(name.lower(), value.strip())
    return Request(parts[0], parts[1], parts[2], headers)


def encode(reply: Reply, common: Mapping[str, str], head_only: bool = False) -> bytes:
    """The bytes of ``reply`` with the headers every reply carries."""
    status = reply.status
    lines = [f"HTTP/1.1 {status.value} {status.phrase}", f"Content-Type: {reply.content_type}"]
    lines.append(f"Content-Length: {len(reply.body)}")
    lines += [f"{k}: {v}" for k, v in {**common, **reply.headers, "Connection": "close"}.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else reply.body)


class Serving:
    """Serves ``handler`` on the listening socket ``sock`` until :meth:`close`.

    :param handler: a request's reply, computed on the loop (keep it bounded).
    :param error_reply: the reply for a request refused before the handler (status, one line).
    :param common: headers sent on every reply, refusals included.
    """

    def __init__(
        self,
        sock: socket.socket,
        handler: Callable[[Request], Reply],
        error_reply: Callable[[HTTPStatus, str], Reply],
        common: Mapping[str, str],
        limits: Limits,
        name: str = "sluice-ui",
    ) -> None:
        self._sock = sock
        self._handler = handler
        self._error_reply = error_reply
        self._common = dict(common)
        self.limits = limits
        self._active: set[asyncio.Task[None]] = set()
        self._refusing: set[asyncio.Task[None]] = set()  # answered 503, lingering: as many again at most
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._workers = ThreadPoolExecutor(WORKERS, thread_name_prefix=f"{name}-reply")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        # the StreamReader's limit is a line's bound: readuntil fails past it without buffering more
        server = await asyncio.start_server(self._connection, sock=self._sock, limit=self.limits.max_line)
        self._ready.set()
        await self._stopping.wait()
        server.close()
        tasks = [*self._active, *self._refusing]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        busy = len(self._active) >= self.limits.max_connections
        if busy and len(self._refusing) >= self.limits.max_connections:
            writer.transport.abort()  # a flood: not even a 503
            return
        pool = self._refusing if busy else self._active
        pool.add(task)
        try:
            async with asyncio.timeout(LINGER_S if busy else self.limits.deadline_s):
                if busy:
                    reply = self._error_reply(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections; try again shortly")
                    head_only, refused = False, True
                else:
                    reply, head_only, refused = await self._answer(reader)
                writer.write(encode(reply, self._common, head_only))
                await writer.drain()
                if refused:
                    await self._linger(reader, writer)
                writer.close()
                await writer.wait_closed()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            writer.transport.abort()  # cut off: nothing more is written to a client that ran out of time
        finally:
            pool.discard(task)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[Reply, bool, bool]:
        """The reply to the request ``reader`` brings, whether it is to a ``HEAD``, and whether the
        request was refused before it was read whole."""
        try:
            request = await read_head(reader, self.limits)
        except HeadError as exc:
            return self._error_reply(exc.status, str(exc)), False, True
        try:
            reply = await asyncio.get_running_loop().run_in_executor(self._workers, self._handler, request)
        except Exception as exc:  # noqa: BLE001 - one line in the log, a 500 to the client
            log.warning("streaming page: a request failed: %s: %s", type(exc).__name__, str(exc)[:200])
            reply = self._error_reply(HTTPStatus.INTERNAL_SERVER_ERROR, "the page failed to answer; see the log")
        return reply, request.method == "HEAD", False

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read what the client still sends, a little while, before closing: a socket closed with
        unread data resets, and a reset can destroy the refusal on its way to the client."""
        writer.write_eof()
        try:
            async with asyncio.timeout(LINGER_S):
                for _ in range(16):
                    if not await reader.read(self.limits.max_head):
                        return
        except TimeoutError:
            return

    @property
    def connections(self) -> int:
        """Connections being served now (those refused 503 not counted)."""
        return len(self._active)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, cut every connection, end the thread."""
        if self._loop is not None and self._stopping is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout_s)
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._sock.close()
