"""The client's connection: :class:`TrackerConnection` (connect, hello, reconnect with backoff,
re-register, pushes) and its errors; requests in flight and their deadlines are
:mod:`sluice.tracker.client.pending_requests`, the frames and the trusted block maps
:mod:`sluice.tracker.client.protocol`.  :class:`~sluice.tracker.client.tracker_client.TrackerClient`
adds one typed method per op on top.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl as ssl_module
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypedDict

from sluice.errors import SluiceError
from sluice.retry_log import RetryLog, reason
from sluice.tracker.client.leader_finder import LeaderFinder, parse_address
from sluice.tracker.client.pending_requests import PendingRequests
from sluice.tracker.client.protocol import ClientProtocol
from sluice.tracker.client.protocol import blocks_by_stream as blocks_by_stream
from sluice.tracker.client.protocol import trusted_block as trusted_block
from sluice.tracker.wire.protocol import (
    E_BUSY,
    E_NOT_LEADER,
    E_NOT_REGISTERED,
    E_UNAUTHORIZED,
    E_VERSION,
    PROTOCOL_VERSION,
    PUSH_STOP,
    PUSH_UPDATE_RATE,
    RETRYABLE,
    RemoteError,
    encode,
)

log = logging.getLogger(__name__)


class TrackerUnavailable(SluiceError, ConnectionError):
    """The tracker did not answer in time (or the client is closed)."""

    retriable = True


class TrackerAuthError(SluiceError, PermissionError):
    """The tracker refused the hello (token or protocol version): retrying cannot help."""


class ConnectionLost(SluiceError, ConnectionError):
    """The connection dropped under a request; the request is sent again once reconnected."""

    retriable = True


NOT_LEADER_MAX_BACKOFF_S = 0.5  # a takeover is seen at most this late (the lease is seconds)


class ConnectionOptions(TypedDict, total=False):
    """:class:`TrackerConnection`'s settings beyond the address, the role and the credentials, as
    a client passes them on (``TrackerClient(..., **options)``)."""

    request_timeout: float
    on_update_rate: Callable[[int, str, float], Awaitable[None] | None] | None
    on_stop: Callable[[str, str], Awaitable[None] | None] | None
    connect_timeout: float | None
    max_backoff: float


class ClientOptions(ConnectionOptions, total=False):
    """Every setting of a client beyond its address and role (``SyncTrackerClient(..., **options)``)."""

    auth_token: str | None
    ssl: ssl_module.SSLContext | None


class TrackerConnection:
    """One connection to the tracker kept up for its users; see
    :class:`~sluice.tracker.client.tracker_client.TrackerClient` for the parameters.  ``_call`` sends a
    request until answered (across reconnects)."""

    def __init__(
        self,
        address: str,
        role: str,
        *,
        auth_token: str | None = None,
        ssl: ssl_module.SSLContext | None = None,
        request_timeout: float = 10.0,
        on_update_rate: Callable[[int, str, float], Awaitable[None] | None] | None = None,
        on_stop: Callable[[str, str], Awaitable[None] | None] | None = None,
        connect_timeout: float | None = None,
        max_backoff: float = 2.0,
    ) -> None:
        self.finder = LeaderFinder(address)
        self.address = self.finder.current
        self.role = role
        self.auth_token = auth_token
        self.ssl = ssl
        self.request_timeout = request_timeout
        self.on_update_rate = on_update_rate
        self.on_stop = on_stop
        self.connect_timeout = connect_timeout
        self.max_backoff = max_backoff
        self._pending = PendingRequests()
        self._sweeper: asyncio.Task | None = None
        self._proto: ClientProtocol | None = None
        self._ready: asyncio.Event | None = None
        self._closed = False
        self._fatal: BaseException | None = None
        self._task: asyncio.Task | None = None
        self._registrations: dict[str, tuple[int, str, int]] = {}
        self._block_stores: dict[str, str] = {}  # receiver -> its block store, sent again on each registration
        self._redirected = False  # the connection was closed to follow a not_leader
        self._unlisted: set[Any] = set()  # leaders named to this client that are not on its list
        self._registering: asyncio.Future | None = None  # the round of registrations under way
        self._callbacks: set[asyncio.Task] = set()
        self._first: asyncio.Future | None = None  # the first connection, awaited by start()
        self._no_wait: asyncio.Event | None = None  # set by stop_waiting()
        self.retries = RetryLog(f"the tracker at {address}", max_backoff)
        # not_leader rounds while only a standby answers (a takeover under way): a few a second, so
        # said as an outage is, the first, then a count at most every 30 s, then the recovery
        self.redirects = RetryLog(f"a leading tracker among {','.join(self.finder.addresses)}", max_backoff)

    # --- connection --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (retrying with backoff) and say hello; later reconnects happen by themselves."""
        self._ready = asyncio.Event()
        self._no_wait = asyncio.Event()
        self._closed = False
        first: asyncio.Future = asyncio.get_running_loop().create_future()
        self._first = first
        self._task = asyncio.get_running_loop().create_task(self._maintain(first), name="tracker-client")
        period = max(0.005, min(0.25, self.request_timeout / 20))
        self._sweeper = asyncio.get_running_loop().create_task(
            self._pending.expire(period), name="tracker-client-timeouts"
        )
        try:
            await asyncio.wait_for(asyncio.shield(first), self.connect_timeout)
        except TimeoutError:
            await self.close()
            raise TrackerUnavailable(
                f"cannot reach the tracker at {self.address} within {self.connect_timeout}s"
            ) from None
        except BaseException:
            await self.close()
            raise

    async def _maintain(self, first: asyncio.Future) -> None:
        loop = asyncio.get_running_loop()
        backoff = 0.05
        while not self._closed:
            self.address = self.finder.current
            try:
                _, proto = await loop.create_connection(
                    lambda: ClientProtocol(self), *parse_address(self.address), ssl=self.ssl
                )
            except Exception as exc:  # noqa: BLE001 - OSError mostly; nothing may end the reconnect loop but close()
                self.finder.failed()
                self._retry_failed(exc)
                log.debug("tracker %s not reachable: %s; retrying in %.2fs", self.address, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                continue
            self._proto = proto
            try:
                await self._handshake()
            except TrackerAuthError as exc:
                self._fatal = exc
                proto.close()
                if not first.done():
                    first.set_exception(exc)
                self._pending.fail_all(exc)
                return
            except Exception as exc:  # noqa: BLE001 - connection lost, timeout, a refused re-registration...
                if self._move(exc):
                    self._redirect_failed(exc)
                else:
                    self._retry_failed(exc)
                proto.close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                continue
            backoff = 0.05
            recovered = self.retries.reached()
            if recovered is not None:
                log.info("%s", recovered)
            if self._registrations:  # registered again: this tracker leads
                self._led()
            assert self._ready is not None
            self._ready.set()
            if not first.done():
                first.set_result(None)
            await proto.lost
            self._ready.clear()
            if not self._closed:
                if not self._redirected:  # a redirect was said (rate-limited) where it was heard
                    log.warning("connection to tracker %s lost; reconnecting", self.address)
                    if len(self.finder.addresses) > 1:
                        self.finder.failed()
                self._redirected = False

    def _move(self, error: BaseException) -> bool:
        """After ``not_leader`` (then True), the next connection goes to the leader it named, if
        configured; after any other failure of a handshake, to the next configured tracker."""
        if isinstance(error, RemoteError) and error.code == E_NOT_LEADER:
            leader = error.extra.get("leader")
            if not self.finder.redirect(leader) and leader not in self._unlisted:
                self._unlisted.add(leader)  # said once per address: a standby repeats it every round
                log.warning(
                    "tracker %s names %s as its leader, which is not on this client's list (%s): not "
                    "followed; trying the listed trackers",
                    self.address,
                    leader,
                    ",".join(self.finder.addresses),
                )
            return True
        if len(self.finder.addresses) > 1:
            self.finder.failed()
        return False

    def _redirect_failed(self, error: BaseException) -> None:
        """A ``not_leader`` round, said through :attr:`redirects` (first, then a count now and then)."""
        leader = error.extra.get("leader") if isinstance(error, RemoteError) else None
        why = f"tracker {self.address} does not lead" + (f"; it names {leader}" if leader else "")
        line = self.redirects.failed(why)
        if line is not None:
            log.warning("%s", line)

    def _led(self) -> None:
        """A request was answered by a leader: the recovery line, when not_leader rounds came before."""
        if self.redirects.failing:
            log.info("%s", self.redirects.reached())

    def _retry_failed(self, error: BaseException) -> None:
        """One line when the tracker first cannot be reached, then at a bounded rate (:class:`RetryLog`)."""
        line = self.retries.failed(reason(error))
        if line is not None:
            log.warning("%s", line)

    async def _handshake(self) -> None:
        try:
            await self._send(
                "hello",
                {"version": PROTOCOL_VERSION, "role": self.role, "token": self.auth_token},
                self.request_timeout,
            )
        except RemoteError as exc:
            if exc.code in (E_UNAUTHORIZED, E_VERSION):
                raise TrackerAuthError(f"tracker {self.address} refused hello: {exc.message}") from None
            raise
        await self._register_again()

    async def _register_again(self) -> None:
        """Register every receiver registered through this client again (after a reconnect, or when
        the tracker forgot them: they were silent past its liveness timeout).

        Callers at the same time (a reconnect, several requests answered ``not_registered`` at once)
        share one round: each registration supersedes the one before, and the tracker still takes
        blocks of the superseded incarnation only, so two rounds in a row would refuse the blocks
        formed before them."""
        if self._registering is None or self._registering.done():
            self._registering = asyncio.ensure_future(self._register_all())
        await asyncio.shield(self._registering)

    async def _register_all(self) -> None:
        for receiver_id, (stream_id, host, held) in list(self._registrations.items()):
            fields = {"stream_id": stream_id, "receiver_id": receiver_id, "host": host, "previous_incarnation": held}
            if receiver_id in self._block_stores:
                fields["block_store"] = self._block_stores[receiver_id]
            try:
                reply = await self._send("register_receiver", fields, self.request_timeout)
            except RemoteError as exc:  # e.g. a newer incarnation took the id meanwhile: this one must stop
                if exc.code == E_NOT_LEADER:
                    raise  # not refused: asked at the wrong tracker (the handshake moves to the leader)
                log.warning("tracker refused to register receiver %s again: %s", receiver_id, exc.message)
                self._registrations.pop(receiver_id, None)
                if self.on_stop is not None:
                    self._run_callback(self.on_stop(receiver_id, f"registration refused: {exc.message}"))
                continue
            self._registrations[receiver_id] = (stream_id, host, reply["incarnation"])
            if reply.get("rate") is not None and self.on_update_rate is not None:
                self._run_callback(self.on_update_rate(stream_id, receiver_id, reply["rate"]))

    async def close(self) -> None:
        self._closed = True
        if self._proto is not None:
            self._proto.close()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - a closed task's own failure was reported where it happened
                pass
            self._task = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        closed = TrackerUnavailable(f"the client of the tracker at {self.address} is closed")
        if self._first is not None and not self._first.done():
            self._first.set_exception(closed)  # a start() still waiting for the first connection ends
            self._first.exception()  # retrieved: a start() cancelled meanwhile leaves no warning
        self._pending.fail_all(closed)
        for task in list(self._callbacks):
            task.cancel()

    def _on_lost(self, proto: ClientProtocol) -> None:
        if proto is self._proto:
            if self._ready is not None:
                self._ready.clear()
            self._pending.fail_all(ConnectionLost("connection to the tracker lost"))

    def _on_message(self, msg: dict) -> None:
        rid = msg.get("id")
        if not isinstance(rid, int):  # a push, or an answer to no request of ours
            if rid is None and "op" in msg:
                self._on_push(msg)
            elif rid is None and "error" in msg:
                log.warning("tracker reported an error without a request id: %s", msg["error"])
            return
        self._pending.answer(rid, msg)

    def _on_push(self, msg: dict) -> None:
        op = msg.get("op")
        try:
            if op == PUSH_UPDATE_RATE and self.on_update_rate is not None:
                self._run_callback(self.on_update_rate(int(msg["stream_id"]), msg["receiver_id"], msg["rate"]))
            elif op == PUSH_STOP and self.on_stop is not None:
                self._run_callback(self.on_stop(msg["receiver_id"], msg.get("reason", "")))
        except Exception:
            log.exception("handling the tracker's %s push failed", op)

    def _run_callback(self, result: object) -> None:
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._callbacks.add(task)
            task.add_done_callback(self._callbacks.discard)

    # --- requests ----------------------------------------------------------------------------

    def _ready_now(self) -> bool:
        return self._ready is not None and self._ready.is_set() and not self._closed and self._fatal is None

    async def _send(self, op: str, fields: Mapping[str, object], timeout: float) -> Any:
        """One attempt on the current connection; its ``ok`` as msgpack decoded it (``Any``: each
        request's caller reads the reply its op gives, from a tracker that checked what it holds)."""
        proto = self._proto
        if proto is None or proto.transport is None or proto.transport.is_closing():
            raise ConnectionLost("not connected")
        rid, answer = self._pending.add(timeout)
        proto.send(encode({**fields, "op": op, "id": rid}))
        try:
            return await answer
        finally:
            self._pending.discard(rid)

    def stop_waiting(self) -> None:
        """From now on a request does not wait for a lost connection to come back: it fails at once
        with :class:`TrackerUnavailable` (requests already waiting too).  A stopping service calls
        this so that an outage cannot hold its stop; a live connection still serves requests."""
        if self._no_wait is not None:
            self._no_wait.set()

    async def _wait_ready(self, op: str, timeout: float) -> None:
        """Until connected (``TimeoutError`` after ``timeout`` s), unless :meth:`stop_waiting` is called."""
        assert self._ready is not None and self._no_wait is not None
        waits = [asyncio.ensure_future(self._ready.wait()), asyncio.ensure_future(self._no_wait.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if self._ready.is_set():
            return
        if self._no_wait.is_set():
            raise TrackerUnavailable(f"{op}: not connected to the tracker at {self.address}, and stopping")
        raise TimeoutError

    async def _call(self, op: str, fields: Mapping[str, object], *, forever: bool = False) -> tuple[Any, int]:
        """Send until answered: across reconnects, retrying 'unavailable'; returns (ok, attempts),
        ``ok`` as :meth:`_send` returns it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout
        attempts = 0
        backoff = 0.05
        while True:
            if self._closed or self._ready is None:
                raise TrackerUnavailable(f"{op}: the tracker client is not started or closed")
            if self._fatal is not None:
                raise self._fatal
            remaining = self.request_timeout if forever else deadline - loop.time()
            if remaining <= 0:
                raise TrackerUnavailable(
                    f"{op}: no answer from the tracker at {self.address} within {self.request_timeout}s"
                )
            try:
                if not self._ready.is_set():
                    await self._wait_ready(op, remaining)
                attempts += 1
                answer = await self._send(op, dict(fields), remaining)
                self._led()
                return answer, attempts
            except RemoteError as exc:
                exc.op = op
                if exc.code == E_NOT_REGISTERED and self._registrations and attempts < 3:
                    await self._register_again()  # the tracker expired them (a long pause): back, then retry
                    continue
                if exc.code == E_NOT_LEADER and self._proto is not None:
                    self._move(exc)  # reconnect to the leader it named, then send again
                    self._redirect_failed(exc)
                    self._redirected = True
                    self._proto.close()
                    # a standby names the old leader until its lease lapses: back off between
                    # rounds instead of bouncing between the two many times a second
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, NOT_LEADER_MAX_BACKOFF_S)
                    continue
                if exc.code not in RETRYABLE:
                    raise
                log.log(
                    logging.DEBUG if exc.code == E_BUSY else logging.WARNING,
                    "%s: tracker %s (%s); retrying in %.2fs",
                    op,
                    exc.code,
                    exc.message,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except (TimeoutError, ConnectionLost):
                if self._no_wait is not None and self._no_wait.is_set() and not self._ready.is_set():
                    raise TrackerUnavailable(f"{op}: the connection to the tracker at {self.address} is lost") from None
                if not forever and loop.time() >= deadline:
                    raise TrackerUnavailable(
                        f"{op}: no answer from the tracker at {self.address} within {self.request_timeout}s"
                    ) from None
                await asyncio.sleep(0.01)  # let the connection task notice the loss
