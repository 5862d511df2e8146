"""One tracker connection: frames in, replies out in durability order, and the bounds on a peer.

A peer is bounded before it has proved anything: frames before ``hello`` are at most
:data:`HELLO_LIMITS`, a hello must come within the server's deadline, a connection that keeps sending
bad frames is closed, and log lines about hostile peers (and failed accepts) are rate-limited.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from sluice.tracker.metrics import ACCEPT_ERRORS, CONNECTIONS_CLOSED
from sluice.tracker.protocol import E_TOO_LARGE, FrameDecoder, FrameTooLarge, Limits, error

if TYPE_CHECKING:  # pragma: no cover
    from sluice.tracker.server import TrackerServer

log = logging.getLogger("sluice.tracker.server")  # one logger for the tracker's network side
MAX_WRITE_BUFFER = 8 << 20  # stop reading from a peer that does not read its replies
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


class Connection(asyncio.Protocol):
    """One peer: frames in, replies out in durability order.

    :param server: the server the connection belongs to.
    """

    def __init__(self, server: TrackerServer) -> None:
        self.server = server
        self.decoder = FrameDecoder(HELLO_LIMITS)
        self.out: deque[tuple[int, bytes]] = deque()
        self.out_max = 0  # highest WAL sequence number a queued frame waits for
        self.transport: asyncio.Transport | None = None
        self.hello = False
        self.role = ""
        self.closing = False
        self.peer = "?"
        self.bad_frames = 0
        self.close_reason: tuple[str, str] | None = None
        self.opened = self.last_active = time.monotonic()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport), "a stream server gives a Transport"
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if len(self.server.conns) >= self.server.max_connections:
            CONNECTIONS_CLOSED.labels("max_connections").inc()
            if self.server.throttle("max_connections"):
                log.warning(
                    "refused a connection from %s: tracker.max_connections = %d are open",
                    self.peer,
                    self.server.max_connections,
                )
            self.closing = True
            transport.abort()
            return
        transport.set_write_buffer_limits(high=MAX_WRITE_BUFFER)
        self.server.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.conns.discard(self)
        self.server.waiting.discard(self)
        self.server.service.registry.forget_connection(self)
        self.closing = True

    def pause_writing(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.closing and not self.server.stopping:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_active = time.monotonic()
        try:
            frames = self.decoder.feed(data)
        except FrameTooLarge as exc:
            self.server.bad(self, "too_large", str(exc))
            self.queue(error(None, E_TOO_LARGE, str(exc)), 0)
            self.close_after_replies()
            return
        handle = self.server.handle_frame
        for frame in frames:
            if self.closing or self.close_reason:
                break
            handle(self, frame)
        if self.close_reason and not self.closing:
            self.close_for(*self.close_reason)
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
        if chunks and not self.transport.is_closing():
            self.transport.write(b"".join(chunks) if len(chunks) > 1 else chunks[0])
        if out:
            self.server.waiting.add(self)
        elif self.closing:
            self.transport.close()

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

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
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
