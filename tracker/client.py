"""``TrackerClient``: the asyncio client receivers and the driver use to talk to the tracker.

Many requests may be in flight on one connection (each has an id), so a receiver pushing blocks
and heartbeating, or a benchmark with hundreds of concurrent ``add_block`` calls, pays one round
trip per group, not per request.  The client reconnects by itself with exponential backoff,
re-sends ``hello`` and re-registers the receivers registered through it (so pushes reach them
again); requests cut off by a lost connection are sent again on the new one.  ``add_block`` is
retried until acknowledged (the tracker is idempotent on block id); other requests give up after
``request_timeout`` with :class:`TrackerUnavailable`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import ssl as ssl_module
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.block_info import ReceivedBlockInfo
from sluice.tracker.allocation_reply import decode_allocation
from sluice.tracker.client_connection import (
    ClientProtocol,
    ConnectionLost,
    TrackerAuthError,
    TrackerUnavailable,
    blocks_by_stream,
    parse_address,
    trusted_block,
)
from sluice.tracker.protocol import (
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
from sluice.tracker.received_block_tracker import AddBlockResult

log = logging.getLogger(__name__)

__all__ = ["TrackerClient", "QueuedBlocks", "AddBlockResult", "TrackerUnavailable", "TrackerAuthError", "RemoteError"]


@dataclass(frozen=True)
class QueuedBlocks:
    """A ``list_blocks`` answer: ``(seq, block)`` in order, the oldest queued number and the next one."""

    blocks: list[tuple[int, ReceivedBlockInfo]]
    first_seq: int
    next_seq: int


@dataclass(frozen=True)
class Cleanup:
    """A ``batch_completed`` answer: the blocks to delete, of the batches up to ``through_ms``;
    pass ``through_ms`` back as ``deleted_through_ms`` once they are deleted."""

    deletable: list[ReceivedBlockInfo]
    through_ms: int | None


class TrackerClient:
    """Asyncio RPC client of the tracker (the ops of :mod:`sluice.tracker.protocol`).

    :param address: the tracker's ``HOST:PORT``.
    :param role: ``receiver``, ``driver`` or ``admin``: the ops the tracker lets this connection run.
    :param auth_token: sent in ``hello`` when the tracker requires one.
    :param ssl: a client TLS context when the tracker serves TLS.
    :param request_timeout: seconds before a request other than ``add_block`` gives up with
        :class:`TrackerUnavailable` (``add_block`` is retried until acknowledged).
    :param on_update_rate: called with ``(stream_id, receiver_id, rate)`` on a rate push.
    :param on_stop: called with ``(receiver_id, reason)`` when the tracker stops a receiver.
    :param connect_timeout: seconds :meth:`start` waits for the first connection; ``None``: for ever.
    :param max_backoff: the longest wait, in seconds, between two reconnection attempts.
    """

    def __init__(self, address: str, role: str, *, auth_token: str | None = None,
                 ssl: ssl_module.SSLContext | None = None, request_timeout: float = 10.0,
                 on_update_rate: Callable[[int, str, float], Awaitable[None] | None] | None = None,
                 on_stop: Callable[[str, str], Awaitable[None] | None] | None = None,
                 connect_timeout: float | None = None, max_backoff: float = 2.0) -> None:
        self.address = address
        self.host, self.port = parse_address(address)
        self.role = role
        self.auth_token = auth_token
        self.ssl = ssl
        self.request_timeout = request_timeout
        self.on_update_rate = on_update_rate
        self.on_stop = on_stop
        self.connect_timeout = connect_timeout
        self.max_backoff = max_backoff
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._deadlines: dict[int, float] = {}  # request id -> loop time it expires (one sweeper, no timers)
        self._sweeper: asyncio.Task | None = None
        self._proto: ClientProtocol | None = None
        self._ready: asyncio.Event | None = None
        self._closed = False
        self._fatal: BaseException | None = None
        self._task: asyncio.Task | None = None
        self._registrations: dict[str, tuple[int, str, int]] = {}
        self._callbacks: set[asyncio.Task] = set()

    # --- connection --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (retrying with backoff) and say hello; later reconnects happen by themselves."""
        self._ready = asyncio.Event()
        self._closed = False
        first: asyncio.Future = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._maintain(first), name="tracker-client")
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="tracker-client-timeouts")
        try:
            await asyncio.wait_for(asyncio.shield(first), self.connect_timeout)
        except TimeoutError:
            await self.close()
            raise TrackerUnavailable(f"cannot reach the tracker at {self.address} "
                                     f"within {self.connect_timeout}s") from None
        except BaseException:
            await self.close()
            raise

    async def _maintain(self, first: asyncio.Future) -> None:
        loop = asyncio.get_running_loop()
        backoff = 0.05
        while not self._closed:
            try:
                _, proto = await loop.create_connection(lambda: ClientProtocol(self), self.host, self.port,
                                                        ssl=self.ssl)
            except Exception as exc:  # noqa: BLE001 - OSError mostly; nothing may end the reconnect loop but close()
                log.debug("tracker %s not reachable: %s; retrying in %.2fs", self.address, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                continue
            self._proto = proto
            try:
                await self._handshake()
            except TrackerAuthError as exc:
                self._fatal = exc
                proto.transport.close()
                if not first.done():
                    first.set_exception(exc)
                self._fail_pending(exc)
                return
            except Exception as exc:  # noqa: BLE001 - connection lost, timeout, a refused re-registration...
                log.warning("hello to tracker %s failed: %s", self.address, exc)
                proto.transport.close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                continue
            backoff = 0.05
            assert self._ready is not None
            self._ready.set()
            if not first.done():
                first.set_result(None)
            await proto.lost
            self._ready.clear()
            if not self._closed:
                log.warning("connection to tracker %s lost; reconnecting", self.address)

    async def _handshake(self) -> None:
        try:
            await self._send("hello", {"version": PROTOCOL_VERSION, "role": self.role, "token": self.auth_token},
                             self.request_timeout)
        except RemoteError as exc:
            if exc.code in (E_UNAUTHORIZED, E_VERSION):
                raise TrackerAuthError(f"tracker {self.address} refused hello: {exc.message}") from None
            raise
        await self._register_again()

    async def _register_again(self) -> None:
        """Register every receiver registered through this client again (after a reconnect, or when
        the tracker forgot them: they were silent past its liveness timeout)."""
        for receiver_id, (stream_id, host, incarnation) in list(self._registrations.items()):
            try:
                reply = await self._send("register_receiver", {"stream_id": stream_id, "receiver_id": receiver_id,
                                                               "host": host, "incarnation": incarnation},
                                         self.request_timeout)
            except RemoteError as exc:  # e.g. a newer incarnation took the id meanwhile: this one must stop
                log.warning("tracker refused to register receiver %s again: %s", receiver_id, exc.message)
                self._registrations.pop(receiver_id, None)
                if self.on_stop is not None:
                    self._run_callback(self.on_stop(receiver_id, f"registration refused: {exc.message}"))
                continue
            if reply.get("rate") is not None and self.on_update_rate is not None:
                self._run_callback(self.on_update_rate(stream_id, receiver_id, reply["rate"]))

    async def close(self) -> None:
        self._closed = True
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
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
        self._fail_pending(TrackerUnavailable("the tracker client is closed"))
        for task in list(self._callbacks):
            task.cancel()

    async def _sweep(self) -> None:
        """Expire requests past their deadline (cheaper than a timer per request)."""
        loop = asyncio.get_running_loop()
        period = max(0.005, min(0.25, self.request_timeout / 20))
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            expired = [rid for rid, deadline in self._deadlines.items() if deadline <= now]
            for rid in expired:
                self._deadlines.pop(rid, None)
                fut = self._pending.pop(rid, None)
                if fut is not None and not fut.done():
                    fut.set_exception(TimeoutError())

    def _fail_pending(self, exc: BaseException) -> None:
        self._deadlines.clear()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    def _on_lost(self, proto: ClientProtocol) -> None:
        if proto is self._proto:
            if self._ready is not None:
                self._ready.clear()
            self._fail_pending(ConnectionLost("connection to the tracker lost"))

    def _on_message(self, msg: dict) -> None:
        rid = msg.get("id")
        if rid is None and "op" in msg:
            self._on_push(msg)
            return
        fut = self._pending.pop(rid, None)
        self._deadlines.pop(rid, None)
        if fut is None or fut.done():
            if rid is None and "error" in msg:
                log.warning("tracker reported an error without a request id: %s", msg["error"])
            return
        if "error" in msg:
            err = msg["error"] if isinstance(msg["error"], dict) else {}
            fut.set_exception(RemoteError(str(err.get("code", "?")), str(err.get("message", ""))))
        else:
            fut.set_result(msg.get("ok"))

    def _on_push(self, msg: dict) -> None:
        op = msg.get("op")
        try:
            if op == PUSH_UPDATE_RATE and self.on_update_rate is not None:
                self._run_callback(self.on_update_rate(int(msg["stream_id"]), msg["receiver_id"], msg["rate"]))
            elif op == PUSH_STOP and self.on_stop is not None:
                self._run_callback(self.on_stop(msg["receiver_id"], msg.get("reason", "")))
        except Exception:
            log.exception("handling the tracker's %s push failed", op)

    def _run_callback(self, result: Any) -> None:
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._callbacks.add(task)
            task.add_done_callback(self._callbacks.discard)

    # --- requests ----------------------------------------------------------------------------

    def _ready_now(self) -> bool:
        return self._ready is not None and self._ready.is_set() and not self._closed and self._fatal is None

    async def _send(self, op: str, fields: dict, timeout: float) -> Any:
        """One attempt on the current connection."""
        proto = self._proto
        if proto is None or proto.transport is None or proto.transport.is_closing():
            raise ConnectionLost("not connected")
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending[rid] = fut
        self._deadlines[rid] = loop.time() + timeout
        fields["op"] = op
        fields["id"] = rid
        proto.send(encode(fields))
        try:
            return await fut
        finally:
            if self._pending.pop(rid, None) is not None:
                self._deadlines.pop(rid, None)

    async def _call(self, op: str, fields: dict, *, forever: bool = False) -> tuple[Any, int]:
        """Send until answered: across reconnects, retrying 'unavailable'; returns (ok, attempts)."""
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
                raise TrackerUnavailable(f"{op}: no answer from the tracker at {self.address} "
                                         f"within {self.request_timeout}s")
            try:
                if not self._ready.is_set():
                    await asyncio.wait_for(self._ready.wait(), remaining)
                attempts += 1
                return await self._send(op, dict(fields), remaining), attempts
            except RemoteError as exc:
                exc.op = op
                if exc.code == E_NOT_REGISTERED and self._registrations and attempts < 3:
                    await self._register_again()  # the tracker expired them (a long pause): back, then retry
                    continue
                if exc.code not in RETRYABLE:
                    raise
                log.warning("%s: tracker unavailable (%s); retrying in %.2fs", op, exc.message, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except (TimeoutError, ConnectionLost):
                if not forever and loop.time() >= deadline:
                    raise TrackerUnavailable(f"{op}: no answer from the tracker at {self.address} "
                                             f"within {self.request_timeout}s") from None
                await asyncio.sleep(0.01)  # let the connection task notice the loss

    async def register_receiver(self, stream_id: int, receiver_id: str, host: str, incarnation: int) -> float | None:
        reply, _ = await self._call("register_receiver", {"stream_id": stream_id, "receiver_id": receiver_id,
                                                          "host": host, "incarnation": incarnation})
        self._registrations[receiver_id] = (stream_id, host, incarnation)
        return reply.get("rate")

    async def deregister_receiver(self, receiver_id: str, reason: str = "") -> None:
        self._registrations.pop(receiver_id, None)
        await self._call("deregister_receiver", {"receiver_id": receiver_id, "reason": reason})

    async def heartbeat(self, receiver_id: str, lag: int | None = None) -> None:
        reply, _ = await self._call("heartbeat", {"receiver_id": receiver_id, "lag": lag})
        if not reply.get("known", True) and receiver_id in self._registrations:
            stream_id, host, incarnation = self._registrations[receiver_id]
            log.info("tracker does not know receiver %s any more; registering again", receiver_id)
            rate = await self.register_receiver(stream_id, receiver_id, host, incarnation)
            if rate is not None and self.on_update_rate is not None:
                self._run_callback(self.on_update_rate(stream_id, receiver_id, rate))

    async def add_block(self, info: ReceivedBlockInfo) -> AddBlockResult:
        """Retried until the tracker acknowledges it durably; idempotent on ``info.block_id``."""
        fields = {"block": info.to_wire()}
        try:  # the common case, one attempt on a live connection, without _call's retry frame
            reply = await self._send("add_block", fields, self.request_timeout) if self._ready_now() else None
        except (TimeoutError, ConnectionLost, RemoteError):
            reply = None
        if reply is None:
            reply, _ = await self._call("add_block", fields, forever=True)
        if not reply["accepted"]:
            return AddBlockResult(False, None)
        block = reply.get("block")
        return AddBlockResult(True, trusted_block(block) if block else info)

    async def allocate_blocks(self, batch_time_ms: int, max_records: Mapping[int, int] | None = None
                              ) -> dict[int, list[ReceivedBlockInfo]] | None:
        """The batch's blocks per stream (``max_records`` bounds the streams it names), or None."""
        fields: dict[str, Any] = {"batch_time_ms": batch_time_ms}
        if max_records:
            fields["max_records"] = [[int(s), int(n)] for s, n in sorted(max_records.items())]
        reply, attempts = await self._call("allocate_blocks", fields)
        if reply["allocated"]:
            return decode_allocation(reply["blocks"])
        if attempts > 1 and reply.get("last_allocated_ms") == batch_time_ms:
            # Our first attempt allocated it and its reply was lost with the connection.
            return await self.get_blocks_of_batch(batch_time_ms)
        return None

    async def get_blocks_of_batch(self, batch_time_ms: int) -> dict[int, list[ReceivedBlockInfo]]:
        reply, _ = await self._call("get_blocks_of_batch", {"batch_time_ms": batch_time_ms})
        return blocks_by_stream(reply["blocks"])

    async def batch_completed(self, batch_info: dict, deleted_through_ms: int | None = None) -> Cleanup:
        """Report a finished batch; ``deleted_through_ms``: the ``through_ms`` of an earlier answer
        whose blocks are deleted now (the tracker forgets those batches)."""
        reply, _ = await self._call("batch_completed", {"batch_info": batch_info,
                                                        "deleted_through_ms": deleted_through_ms})
        through = reply.get("through_ms")
        return Cleanup([trusted_block(b) for b in reply["deletable"]],
                       through if type(through) is int else None)

    async def list_blocks(self, stream_id: int, from_seq: int, until_seq: int | None = None,
                          max_records: int | None = None) -> QueuedBlocks:
        """The stream's queued blocks numbered ``from_seq <= seq < until_seq``, not taken (Structured Streaming)."""
        fields: dict[str, Any] = {"stream_id": stream_id, "from_seq": from_seq}
        if until_seq is not None:
            fields["until_seq"] = until_seq
        if max_records is not None:
            fields["max_records"] = max_records
        reply, _ = await self._call("list_blocks", fields)
        return QueuedBlocks([(seq, trusted_block(b)) for seq, b in zip(reply["seqs"], reply["blocks"])],
                            reply["first_seq"], reply["next_seq"])

    async def commit_blocks(self, stream_id: int, until_seq: int) -> list[ReceivedBlockInfo]:
        """Drop the stream's queued blocks numbered below ``until_seq``; returns them for deletion."""
        reply, _ = await self._call("commit_blocks", {"stream_id": stream_id, "until_seq": until_seq})
        return [trusted_block(b) for b in reply["deletable"]]

    async def publish_rate(self, stream_id: int, rate: float) -> None:
        await self._call("publish_rate", {"stream_id": stream_id, "rate": float(rate)})

    async def report_error(self, stream_id: int, receiver_id: str, message: str, error: str = "") -> None:
        await self._call("report_error", {"stream_id": stream_id, "receiver_id": receiver_id,
                                          "message": message, "error": error})

    async def status(self) -> dict:
        reply, _ = await self._call("status", {})
        reply["streams"] = {int(s): v for s, v in reply["streams"].items()}
        reply["rates"] = {int(s): v for s, v in reply["rates"].items()}
        return reply

    async def __aenter__(self) -> TrackerClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
