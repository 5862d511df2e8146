"""One tracker connection: frames in, replies out in durability order, and the bounds on a peer.

A peer is bounded before it has proved anything: frames before ``hello`` are at most
:data:`HELLO_LIMITS`, a hello must come within the server's deadline, connections without hello
have their own small cap (the oldest is closed for a new one), a frame begun must be complete within
the frame deadline, a connection that keeps sending bad frames is closed, and log lines about
hostile peers (and failed accepts) are rate-limited.  A connection is not read while its unsent
replies exceed :data:`REPLY_HIGH_WATER`: the frames of one read are answered one by one and the rest
wait, so pipelined requests cannot make the tracker build replies faster than the peer reads them.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import deque
from typing import Any, Protocol

from sluice.tracker.server.auth import NONE, Grant
from sluice.tracker.server.metrics import ACCEPT_ERRORS, CONNECTIONS_CLOSED
from sluice.tracker.server.service import TrackerService
from sluice.tracker.wire.protocol import E_TOO_LARGE, BadFrame, FrameDecoder, FrameTooLarge, Limits, error

log = logging.getLogger("sluice.tracker.server.server")  # one logger for the tracker's network side
REPLY_HIGH_WATER = 4 << 20  # unsent reply bytes past which a connection is not read
FD_RESERVE = 128  # file descriptors kept free of connections: the log's segments, snapshots, metrics
HELLO_LIMITS = Limits(max_frame=4096, max_array_len=64, max_map_len=64)  # before hello: small frames only
MAX_BAD_FRAMES = 16  # a connection that sent this many bad frames is closed


class Throttle:
    """At most one log line per reason per second: a hostile peer must not flood the log."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def __call__(self, reason: str) -> bool:
        now = time.monotonic()
        if now - self._last.get(reason, 0.0) >= 1.0:
            self._last[reason] = now
            return True
        return False


class Owner(Protocol):
    """What a connection asks of the server it belongs to (:class:`~.server.TrackerServer`): the
    server's shared sets and counts, its throttle, and where frames and closes go.  Stated here so
    that the connection needs nothing of the server module, which builds connections."""

    authenticated: int  # connections past hello; a closing one takes itself off

    @property
    def service(self) -> TrackerService: ...
    @property
    def max_pending_hellos(self) -> int: ...
    @property
    def pending_hellos(self) -> dict[Connection, None]: ...
    @property
    def conns(self) -> set[Connection]: ...
    @property
    def waiting(self) -> set[Connection]: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def throttle(self) -> Throttle: ...
    def bad(self, conn: Connection, reason: str, detail: str) -> None: ...
    def handle_frame(self, conn: Connection, frame: dict | BadFrame) -> None: ...
    def drain_touched(self) -> None: ...
    def schedule_flush(self) -> None: ...
    def appended(self) -> int: ...
    def durable(self) -> int: ...


class Connection(asyncio.Protocol):
    """One peer: frames in, replies out in durability order.

    :param server: the server the connection belongs to.
    """

    def __init__(self, server: Owner) -> None:
        self.server = server
        self.decoder = FrameDecoder(HELLO_LIMITS)
        self.out: deque[tuple[int, bytes]] = deque()
        self.out_max = 0  # highest WAL sequence number a queued frame waits for
        self.out_bytes = 0  # bytes in ``out``
        self.held: deque[dict | BadFrame] = deque()  # frames read, not handled yet (replies over the mark)
        self.partial_since: float | None = None  # when the frame now begun started arriving
        self.transport: asyncio.Transport | None = None
        self.hello = False
        self.grant: Grant = NONE
        self.role = ""
        self.closing = False
        self._write_paused = False
        self._resume_scheduled = False
        self.peer = "?"
        self.bad_frames = 0
        self.close_reason: tuple[str, str] | None = None
        self.opened = self.last_active = time.monotonic()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport), "a stream server gives a Transport"
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        pending = self.server.pending_hellos
        if len(pending) >= self.server.max_pending_hellos:
            oldest = next(iter(pending))
            del pending[oldest]
            CONNECTIONS_CLOSED.labels("max_pending_hellos").inc()
            if self.server.throttle("max_pending_hellos"):
                log.warning(
                    "closing the connection from %s: tracker.max_pending_hellos = %d connections have not said "
                    "hello; the oldest gives way",
                    oldest.peer,
                    self.server.max_pending_hellos,
                )
            oldest.closing = True
            if oldest.transport is not None:
                oldest.transport.abort()
        transport.set_write_buffer_limits(high=REPLY_HIGH_WATER)
        pending[self] = None
        self.server.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.pending_hellos.pop(self, None)
        if self.hello and self in self.server.conns:
            self.server.authenticated -= 1
        self.server.conns.discard(self)
        self.server.waiting.discard(self)
        self.server.service.registry.forget_connection(self)
        self.closing = True

    def pause_writing(self) -> None:
        self._write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self.handle_held()

    def backlog(self) -> int:
        """Reply bytes not yet sent: queued here (waiting for the log) and in the transport."""
        buffered = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return self.out_bytes + buffered

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        now = self.last_active = time.monotonic()
        try:
            frames = self.decoder.feed(data)
        except FrameTooLarge as exc:
            self.server.bad(self, "too_large", str(exc))
            self.queue(error(None, E_TOO_LARGE, str(exc)), 0)
            self.close_after_replies()
            return
        if not self.decoder.buffered:
            self.partial_since = None
        elif frames or self.partial_since is None:  # a new frame began in this read
            self.partial_since = now
        self.held.extend(frames)
        self.handle_held()

    def handle_held(self) -> None:
        """Answer the frames read, one by one, while the unsent replies stay under the mark; read
        again only once every frame read is answered."""
        self._resume_scheduled = False
        if self.closing or self.transport is None:
            return
        handle = self.server.handle_frame
        held = self.held
        while held and not self.closing and not self.close_reason and self.backlog() <= REPLY_HIGH_WATER:
            handle(self, held.popleft())
        if self.close_reason and not self.closing:
            self.close_for(*self.close_reason)
        if not self.closing:
            if held or self._write_paused:
                self.transport.pause_reading()
            elif not self.server.stopping:
                self.transport.resume_reading()
        self.drain()
        self.server.drain_touched()
        self.server.schedule_flush()

    def queue(self, data: bytes, after: int | None = None) -> None:
        """Send ``data`` once the WAL is durable up to ``after`` (default: everything logged so far).

        Error replies pass ``after=0``: they depend on no event, and must still go out when the
        log has failed and nothing will become durable again.
        """
        seq = self.server.appended() if after is None else after
        if seq > self.out_max:
            self.out_max = seq
        self.out.append((seq, data))
        self.out_bytes += len(data)

    def drain(self) -> None:
        """Write every queued reply whose events are durable; wait for the WAL for the rest."""
        if self.transport is None:
            return
        durable = self.server.durable()
        out = self.out
        if self.out_max <= durable:  # the common case: everything queued is durable
            chunks = [d for _, d in out]
            out.clear()
            self.out_max = 0
        else:
            chunks = [d for seq, d in out if seq <= durable]
            if chunks:
                self.out = out = deque(item for item in out if item[0] > durable)
        if chunks:
            self.out_bytes -= sum(map(len, chunks))
            if not self.transport.is_closing():
                self.transport.write(b"".join(chunks) if len(chunks) > 1 else chunks[0])
        if out:
            self.server.waiting.add(self)
        elif self.closing:
            self.transport.close()
        if self.held and not self._resume_scheduled and not self.closing and self.backlog() <= REPLY_HIGH_WATER:
            self._resume_scheduled = True  # not from inside a handler: the loop comes back to it
            asyncio.get_running_loop().call_soon(self.handle_held)

    def close_for(self, reason: str, message: str) -> None:
        """Close (after the replies already queued), counted under ``reason``."""
        CONNECTIONS_CLOSED.labels(reason).inc()
        if self.server.throttle("close_" + reason):
            log.warning("closing the connection from %s: %s", self.peer, message)
        self.close_after_replies()

    def close_after_replies(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.pause_reading()
        self.drain()


class AcceptErrors:
    """The loop's exception handler: accept errors (out of file descriptors) are counted and logged at
    most once a second, without the traceback asyncio prints per failed accept; the rest as asyncio does."""

    def __init__(self, throttle: Throttle) -> None:
        self.throttle = throttle

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:  # asyncio's handler type
        message = str(context.get("message", ""))
        if message.startswith("socket.accept() out of system resource"):
            ACCEPT_ERRORS.inc()
            if self.throttle("accept"):
                log.error(
                    "accepting connections fails: %s (counted in sluice_tracker_accept_errors_total; "
                    "logged at most once a second)",
                    context.get("exception"),
                )
            return
        loop.default_exception_handler(context)


def fit_fd_limit(max_connections: int, max_pending_hellos: int) -> int:
    """``max_connections`` lowered so that every connection fits the open-files limit with
    :data:`FD_RESERVE` to spare (the soft limit is raised to the hard one first): out of file
    descriptors, the tracker would refuse connections but could no longer roll its log."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return max_connections
    fitting = max(1, soft - FD_RESERVE - max_pending_hellos)
    if fitting < max_connections:
        log.warning(
            "tracker.max_connections = %d lowered to %d: the open-files limit is %d, and %d are kept for "
            "connections without hello and %d for the log",
            max_connections,
            fitting,
            soft,
            max_pending_hellos,
            FD_RESERVE,
        )
        return fitting
    return max_connections
