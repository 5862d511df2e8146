"""The tracker's asyncio shell: connections, frames, durable replies, pushes, liveness, shutdown.

One event loop; each connection is an :class:`asyncio.Protocol` (no per-request task: at tens of
thousands of requests per second a task each would cost more than the work).  A request is
handled synchronously as its frame arrives; its reply is queued with the WAL sequence number at
that moment and written only once :class:`~sluice.tracker.log.group_commit.GroupCommit` reports that number
durable, so every event a reply depends on (and every event before it) is on disk first.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
import time
from collections.abc import Sequence

from sluice.block_info import InvalidMessage
from sluice.settings import TrackerSettings
from sluice.tracker.log.events import LogWriteFailed
from sluice.tracker.log.group_commit import GroupCommit, WALFailed
from sluice.tracker.log.protocol import Deposed
from sluice.tracker.server import metrics
from sluice.tracker.server.auth import Credentials
from sluice.tracker.server.connection import MAX_BAD_FRAMES, AcceptErrors, Connection, Throttle, fit_fd_limit
from sluice.tracker.server.hello import Refusal, check_hello
from sluice.tracker.server.limits import Busy, Forbidden, LimitReached
from sluice.tracker.server.metrics import BAD_FRAMES, CONNECTIONS_CLOSED, REQUESTS
from sluice.tracker.server.registry import Push
from sluice.tracker.server.service import BlockStoreRefused, NotRegistered, TrackerService
from sluice.tracker.wire.messages import Request
from sluice.tracker.wire.protocol import (
    DEFAULT_LIMITS,
    E_BAD_FRAME,
    E_BUSY,
    E_FORBIDDEN,
    E_INTERNAL,
    E_INVALID,
    E_LIMIT,
    E_NOT_LEADER,
    E_NOT_REGISTERED,
    E_UNAVAILABLE,
    E_UNKNOWN_OP,
    OPS,
    PROTOCOL_VERSION,
    BadFrame,
    Limits,
    UnknownOp,
    check_request,
    encode,
    error,
    ok,
)

log = logging.getLogger(__name__)

_DEFAULTS = TrackerSettings()  # the schema's tracker.* defaults
FLUSH_DELAY_S = 0.1  # registrations within this are pushed together (ReceiverRegistry.flush)


class TrackerServer:
    """Serves a :class:`TrackerService` over TCP (optionally TLS), replies after group commit.

    :param service: what the requests do.
    :param commit: the group commit whose durability gates every reply; ``None``: no log.
    :param auth_token: a full-access token every ``hello`` must carry (shorthand for ``credentials``).
    :param credentials: the tokens (and client certificates) accepted and the roles each gives;
        ``None`` and no ``auth_token``: open, every peer may take every role.
    :param limits: frame size and nesting limits for incoming frames after hello.
    :param liveness_interval_s: how often receivers' liveness (and idle connections) are checked.
    :param max_connections: authenticated connections beyond this are refused at hello (lowered at
        start to fit the process's open-files limit, see :func:`~sluice.tracker.server.connection.fit_fd_limit`).
    :param max_pending_hellos: connections without hello beyond this close the oldest of them, so
        sockets that never say hello cannot keep authenticated clients out.
    :param hello_timeout_s: a connection without a hello after this is closed.
    :param idle_timeout_s: a connection silent this long is closed (clients reconnect by themselves).
    :param frame_timeout_s: a frame begun and not complete after this closes its connection.
    """

    def __init__(
        self,
        service: TrackerService,
        commit: GroupCommit | None = None,
        *,
        auth_token: str | None = None,
        credentials: Credentials | None = None,
        limits: Limits = DEFAULT_LIMITS,
        liveness_interval_s: float = 1.0,
        max_connections: int = _DEFAULTS.max_connections,
        max_pending_hellos: int = _DEFAULTS.max_pending_hellos,
        hello_timeout_s: float = 10.0,
        idle_timeout_s: float = 600.0,
        frame_timeout_s: float = _DEFAULTS.frame_timeout_ms / 1000,
    ) -> None:
        self.service = service
        self.commit = commit
        self.credentials = credentials if credentials is not None else Credentials.from_tokens(auth_token)
        self.limits = limits
        self.liveness_interval_s = liveness_interval_s
        self.max_connections = max_connections
        self.max_pending_hellos = max_pending_hellos
        self.hello_timeout_s = hello_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.pending_hellos: dict[Connection, None] = {}  # oldest first
        self.authenticated = 0
        self._flush_handle: asyncio.TimerHandle | None = None
        self.conns: set[Connection] = set()
        self.waiting: set[Connection] = set()
        self.touched: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: list[asyncio.Task] = []
        self.throttle = Throttle()
        self._ok = {op: REQUESTS.labels(op, "ok") for op in ("hello", *service_ops())}
        self.stopping = False
        self.failed = asyncio.Event()
        self.failure: BaseException | None = None
        # None while this tracker leads; else the leader's address ("" unknown): a standby, or a
        # leader another tracker fenced out, answers every request but status with not_leader
        self.not_leader: str | None = None
        # while a leader's lease renewal is late: what was durable then, the most its replies may cover
        self._held_at: int | None = None
        metrics.watch(service)

    # --- durability --------------------------------------------------------------------------

    def appended(self) -> int:
        """What a reply queued now waits for; a deposed leader's hello and status wait for nothing."""
        if self.commit is None:
            return 0
        return self.commit.appended if self.not_leader is None else self.commit.durable

    def durable(self) -> int:
        if self.commit is None:
            return 0
        return self.commit.durable if self._held_at is None else min(self.commit.durable, self._held_at)

    @property
    def replies_held(self) -> bool:
        return self._held_at is not None

    def hold_replies(self) -> None:
        """Send no reply that waits on the log past what is durable now: a leader that cannot
        confirm its lease may have been deposed, and must not acknowledge on it (error replies,
        which wait on nothing, still go)."""
        if self._held_at is None:
            self._held_at = self.durable()

    def release_replies(self) -> None:
        """The lease was confirmed: send every reply held since :meth:`hold_replies`."""
        self._held_at = None
        self.on_durable()

    def on_durable(self) -> None:
        waiting, self.waiting = self.waiting, set()
        for conn in waiting:
            conn.drain()

    def on_wal_failure(self, exc: BaseException) -> None:
        if isinstance(exc, Deposed):
            # The replies waiting on the log will never be durable: dropped unsent, and each
            # connection closed, so its client reconnects, hears not_leader, and goes to the leader.
            self.not_leader = exc.leader or ""
            for conn in list(self.conns):
                conn.out.clear()
                conn.out_max = 0
                conn.close_for("deposed", f"deposed; the leader is {self.not_leader or 'unknown'}")
        self.failure = exc
        self.failed.set()

    # --- requests ----------------------------------------------------------------------------

    def bad(self, conn: Connection, reason: str, detail: str) -> None:
        BAD_FRAMES.labels(reason).inc()
        if self.throttle(reason):
            log.warning("bad frame from %s (%s): %s", conn.peer, reason, detail[:300])
        conn.bad_frames += 1
        if not conn.hello:  # closed once this frame's error reply is queued (Connection.data_received)
            conn.close_reason = ("bad_before_hello", f"a bad frame before hello ({reason})")
        elif conn.bad_frames >= MAX_BAD_FRAMES:
            conn.close_reason = ("bad_frames", f"{conn.bad_frames} bad frames")

    def handle_frame(self, conn: Connection, frame: dict | BadFrame) -> None:
        if isinstance(frame, BadFrame):
            self.bad(conn, frame.reason, frame.detail)
            conn.queue(error(None, E_BAD_FRAME, frame.detail), 0)
            return
        try:
            op, rid, request = check_request(frame)
        except UnknownOp as exc:
            self.bad(conn, "unknown_op", str(exc))
            REQUESTS.labels("unknown", "unknown_op").inc()
            conn.queue(error(_request_id(frame), E_UNKNOWN_OP, str(exc)), 0)
            return
        except InvalidMessage as exc:
            self.bad(conn, "invalid", str(exc))
            name = frame.get("op") if frame.get("op") in self._ok else "unknown"
            REQUESTS.labels(name, "invalid").inc()
            conn.queue(error(_request_id(frame), E_INVALID, str(exc)), 0)
            return
        if not conn.hello:
            self._hello(conn, op.name, rid, request)
            return
        if op.name == "hello":
            self.bad(conn, "invalid", "hello sent twice")
            conn.queue(error(rid, E_INVALID, "hello was already sent on this connection"), 0)
            return
        if self._refused(conn, op.name, op.roles, rid, request):
            return
        self._run(conn, op.name, rid, request)

    def _run(self, conn: Connection, name: str, rid: int, request: Request) -> None:
        """Run one checked request of an allowed role; queue its reply (an error reply for a refusal)."""
        try:
            result, pushes = self.service.handle(name, request, conn)
        except NotRegistered as exc:
            REQUESTS.labels(name, "not_registered").inc()
            conn.queue(error(rid, E_NOT_REGISTERED, str(exc)), 0)
            return
        except (Forbidden, LimitReached, Busy) as exc:
            code, outcome = _REFUSALS[type(exc)]
            REQUESTS.labels(name, outcome).inc()
            if outcome != "busy" and self.throttle(outcome):
                log.warning("refused %s from %s: %s", name, conn.peer, str(exc)[:300])
            conn.queue(error(rid, code, str(exc)), 0)
            return
        except BlockStoreRefused as exc:  # a receiver's configuration, not a bad frame
            REQUESTS.labels(name, "invalid").inc()
            if self.throttle("block_store"):
                log.warning("refused %s from %s: %s", name, conn.peer, str(exc)[:500])
            conn.queue(error(rid, E_INVALID, str(exc), block_stores=exc.roots), 0)
            return
        except InvalidMessage as exc:
            self.bad(conn, "invalid", str(exc))
            REQUESTS.labels(name, "invalid").inc()
            conn.queue(error(rid, E_INVALID, str(exc)), 0)
            return
        except (LogWriteFailed, WALFailed) as exc:
            REQUESTS.labels(name, "unavailable").inc()
            conn.queue(error(rid, E_UNAVAILABLE, str(exc)), 0)
            return
        except Exception as exc:  # a bug must cost one request, not the service
            log.exception("%s from %s failed", name, conn.peer)
            REQUESTS.labels(name, "error").inc()
            conn.queue(error(rid, E_INTERNAL, f"{type(exc).__name__}: {exc}"[:500]), 0)
            return
        self._ok[name].inc()
        conn.queue(ok(rid, result))
        if pushes:
            self.push(pushes)

    def _refused(self, conn: Connection, name: str, roles: Sequence[str], rid: int, request: Request) -> bool:
        """Answer a request the connection's role may not send, or any while not leading but a
        status that does not ask for the leader's."""
        if conn.role not in roles:
            REQUESTS.labels(name, "forbidden").inc()
            if self.throttle("forbidden"):
                log.warning("forbidden: %s from %s (role %s)", name, conn.peer, conn.role)
            conn.queue(
                error(rid, E_FORBIDDEN, f"role {conn.role} may not {name}; allowed roles: {', '.join(roles)}"), 0
            )
            return True
        if self.not_leader is not None and (name != "status" or request.get("leader")):
            REQUESTS.labels(name, "not_leader").inc()
            where = f"; the leader is {self.not_leader}" if self.not_leader else ""
            conn.queue(error(rid, E_NOT_LEADER, f"this tracker does not lead{where}", leader=self.not_leader), 0)
            return True
        return False

    def _hello(self, conn: Connection, name: str, rid: int, request: Request) -> None:
        def refuse(reason: str, code: str, message: str) -> None:
            self.bad(conn, reason, message)
            REQUESTS.labels("hello", reason).inc()
            conn.queue(error(rid, code, message), 0)
            conn.close_after_replies()

        cert = conn.transport.get_extra_info("peercert") if conn.transport is not None else None
        admitted = check_hello(name, request, self.credentials, cert)
        if isinstance(admitted, Refusal):  # an unauthorized one's message names the role
            if admitted.reason == "unauthorized" and self.throttle("unauthorized"):
                log.warning("refused hello from %s: %s", conn.peer, admitted.message)
            return refuse(admitted.reason, admitted.code, admitted.message)
        if self.authenticated >= self.max_connections:
            CONNECTIONS_CLOSED.labels("max_connections").inc()
            return refuse(
                "max_connections",
                E_LIMIT,
                f"hello refused: tracker.max_connections = {self.max_connections} connections are open; retry later",
            )
        self.pending_hellos.pop(conn, None)
        self.authenticated += 1
        conn.hello = True
        conn.role, conn.grant = admitted
        conn.decoder.set_limits(self.limits)
        self._ok["hello"].inc()
        conn.queue(ok(rid, {"version": PROTOCOL_VERSION, "server": "sluice-tracker"}))

    def push(self, pushes: list[Push]) -> None:
        for target, message in pushes:
            if isinstance(target, Connection) and not target.closing:
                target.queue(encode(message))
                self.touched.add(target)

    def schedule_flush(self) -> None:
        """Push the registry's changed splits soon, together (one push per receiver per flush)."""
        if self.service.registry.dirty and self._flush_handle is None and not self.stopping:
            self._flush_handle = asyncio.get_running_loop().call_later(FLUSH_DELAY_S, self.flush)

    def flush(self) -> None:
        self._flush_handle = None
        pushes = self.service.registry.flush()
        if pushes:
            self.push(pushes)
            self.drain_touched()

    def drain_touched(self) -> None:
        touched, self.touched = self.touched, set()
        for conn in touched:
            conn.drain()

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, host: str, port: int, ssl: ssl_module.SSLContext | None = None) -> None:
        loop = asyncio.get_running_loop()
        if self.commit is not None:
            self.commit.start(on_durable=self.on_durable, on_failure=self.on_wal_failure)
        loop.set_exception_handler(AcceptErrors(self.throttle))
        self.max_connections = fit_fd_limit(self.max_connections, self.max_pending_hellos)
        self._server = await loop.create_server(
            lambda: Connection(self), host, port, ssl=ssl, reuse_address=True, backlog=512
        )
        self._tasks.append(loop.create_task(self._liveness(), name="tracker-liveness"))

    def promote(self, commit: GroupCommit) -> None:
        """A standby that took the log over: from now on requests are logged through ``commit``."""
        self.commit = commit
        commit.start(on_durable=self.on_durable, on_failure=self.on_wal_failure)
        self.not_leader = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def _liveness(self) -> None:
        while True:
            await asyncio.sleep(self.liveness_interval_s)
            self.check_liveness()

    def check_liveness(self) -> None:
        # a standby sees registrations in the log but no heartbeat: it expires no one until it leads
        pushes = self.service.check_liveness() if self.not_leader is None else []
        if pushes:
            self.push(pushes)
            self.drain_touched()
        self.close_stale(time.monotonic())

    def close_stale(self, now: float) -> None:
        """Close connections without a hello past the deadline, with a frame begun and not finished
        past the frame deadline, and any idle past the idle timeout."""
        for conn in list(self.conns):
            if conn.closing:
                continue
            if not conn.hello and now - conn.opened > self.hello_timeout_s:
                conn.close_for("hello_timeout", f"no hello within {self.hello_timeout_s:g} s")
            elif conn.partial_since is not None and now - conn.partial_since > self.frame_timeout_s:
                conn.close_for("frame_timeout", f"a frame begun {self.frame_timeout_s:g} s ago is not complete")
            elif now - conn.last_active > self.idle_timeout_s:
                conn.close_for("idle", f"idle for {self.idle_timeout_s:g} s")

    async def stop(self) -> None:
        """Stop accepting, answer what was already received, flush the log, close."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for conn in list(self.conns):
            if conn.transport is not None:
                conn.transport.pause_reading()
        if self.commit is not None:
            await self.commit.flush()
        for conn in list(self.conns):
            conn.closing = True
            conn.drain()
        if self.commit is not None:
            await self.commit.close()
        await asyncio.sleep(0)


_REFUSALS: dict[type, tuple[str, str]] = {
    Forbidden: (E_FORBIDDEN, "forbidden"),
    LimitReached: (E_LIMIT, "limit"),
    Busy: (E_BUSY, "busy"),
}


def _request_id(frame: dict) -> int | None:
    rid = frame.get("id")
    return rid if type(rid) is int else None


def service_ops() -> list[str]:
    return [o for o in OPS if o != "hello"]
