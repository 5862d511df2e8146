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

import logging
import ssl as ssl_module
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Unpack

from sluice.block_columns import BlockColumns
from sluice.block_info import ReceivedBlockInfo
from sluice.config_key import ConfigError
from sluice.tracker.client.connection import (
    ConnectionLost,
    ConnectionOptions,
    TrackerAuthError,
    TrackerConnection,
    TrackerUnavailable,
    blocks_by_stream,
    trusted_block,
)
from sluice.tracker.client.leader_finder import parse_address
from sluice.tracker.wire import messages as m
from sluice.tracker.wire.allocation_reply import decode_allocation
from sluice.tracker.wire.protocol import MAX_KNOWN_BLOCKS, RemoteError
from sluice.tracker.wire.results import AddBlockResult
from sluice.tracker.wire.tls import is_loopback

log = logging.getLogger(__name__)

__all__ = [
    "TrackerClient",
    "QueuedBlocks",
    "Cleanup",
    "AddBlockResult",
    "TrackerUnavailable",
    "TrackerAuthError",
    "RemoteError",
    "BlockStoreMismatch",
]


class BlockStoreMismatch(ConfigError):
    """The tracker refused a receiver's registration: the receiver's block store is not the tracker's,
    so every block it sent would be refused; only a change of configuration helps."""


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


class TrackerClient(TrackerConnection):
    """Asyncio RPC client of the tracker (the ops of :mod:`sluice.tracker.wire.protocol`).

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

    def __init__(
        self,
        address: str,
        role: str = "driver",
        *,
        auth_token: str | None = None,
        ssl: ssl_module.SSLContext | None = None,
        **options: Unpack[ConnectionOptions],
    ) -> None:
        super().__init__(address, role, auth_token=auth_token, ssl=ssl, **options)
        remote = [a for a in self.finder.addresses if not is_loopback(parse_address(a)[0])]
        if auth_token and ssl is None and remote:
            raise ConfigError(
                f"the tracker at {remote[0]} is not on loopback and no TLS is configured: the token would "
                "travel in clear; set the tls_ca of this client (and TLS on the tracker)"
            )

    async def register_receiver(
        self, stream_id: int, receiver_id: str, host: str, block_store: str | None = None
    ) -> float | None:
        """Register (the tracker assigns the incarnation: :meth:`incarnation`); returns the share.
        Registering again names the incarnation held so far (see ``register_receiver``'s
        ``previous_incarnation``).

        :param block_store: the URL of the store the receiver writes to; a tracker that takes blocks
            in another refuses it: :class:`BlockStoreMismatch`, naming both."""
        fields: dict = {"stream_id": stream_id, "receiver_id": receiver_id, "host": host}
        held = self._registrations.get(receiver_id)
        if held is not None:
            fields["previous_incarnation"] = held[2]
        if block_store is not None:
            fields["block_store"] = self._block_stores[receiver_id] = block_store
        try:
            reply, _ = await self._call("register_receiver", fields)
        except RemoteError as exc:
            theirs = exc.extra.get("block_stores")
            if isinstance(theirs, list) and block_store is not None:
                raise BlockStoreMismatch(
                    f"the tracker at {self.address} takes blocks only in {' or '.join(map(str, theirs))} "
                    f"(its tracker.block_store), and receiver {receiver_id} writes them to {block_store} "
                    "(block_store.url): give both the same store"
                ) from None
            raise
        self._registrations[receiver_id] = (stream_id, host, reply["incarnation"])
        return reply.get("rate")

    def incarnation(self, receiver_id: str) -> int | None:
        """The incarnation of the receiver's current registration through this client (``None``: none)."""
        registration = self._registrations.get(receiver_id)
        return registration[2] if registration is not None else None

    async def known_blocks(self, stream_id: int, receiver_id: str, block_ids: list[str]) -> set[str]:
        """Those of ``block_ids`` (the receiver's own) the tracker holds, asked 1,000 at a time."""
        known: set[str] = set()
        for start in range(0, len(block_ids), MAX_KNOWN_BLOCKS):
            fields = {
                "stream_id": stream_id,
                "receiver_id": receiver_id,
                "block_ids": block_ids[start : start + MAX_KNOWN_BLOCKS],
            }
            reply, _ = await self._call("known_blocks", fields)
            known.update(reply["known"])
        return known

    async def deregister_receiver(self, receiver_id: str, reason: str = "") -> None:
        self._registrations.pop(receiver_id, None)
        await self._call("deregister_receiver", {"receiver_id": receiver_id, "reason": reason})

    async def heartbeat(
        self,
        receiver_id: str,
        lag: int | None = None,
        head_ts_ms: int | None = None,
        open_transaction_records: int | None = None,
    ) -> None:
        """Liveness and the records behind; with a lag, the Kafka timestamp of the last record taken;
        under ``read_committed``, the records open transactions hold back."""
        fields: m.HeartbeatRequest = {"receiver_id": receiver_id, "lag": lag}
        if head_ts_ms is not None:  # left out otherwise: a tracker before it needs no new field
            fields["head_ts_ms"] = head_ts_ms
        if open_transaction_records is not None:  # likewise
            fields["open_transaction_records"] = open_transaction_records
        reply, _ = await self._call("heartbeat", fields)
        if not reply.get("known", True) and receiver_id in self._registrations:
            stream_id, host, _ = self._registrations[receiver_id]
            log.info("tracker does not know receiver %s any more; registering again", receiver_id)
            rate = await self.register_receiver(stream_id, receiver_id, host)
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

    async def allocate_blocks(
        self, batch_time_ms: int, max_records: Mapping[int, int] | None = None
    ) -> dict[int, BlockColumns] | None:
        """The batch's blocks per stream as the reply's checked columns (``max_records`` bounds the
        streams it names), or None when the batch time was allocated already."""
        fields: dict[str, object] = {"batch_time_ms": batch_time_ms}  # max_records as pairs on the wire
        if max_records:
            fields["max_records"] = [[int(s), int(n)] for s, n in sorted(max_records.items())]
        reply, attempts = await self._call("allocate_blocks", fields)
        if reply["allocated"]:
            return decode_allocation(reply["blocks"])
        if attempts > 1 and reply.get("last_allocated_ms") == batch_time_ms:
            # Our first attempt allocated it and its reply was lost with the connection.
            lost = await self.get_blocks_of_batch(batch_time_ms)
            return {stream_id: BlockColumns(blocks) for stream_id, blocks in lost.items()}
        return None

    async def get_blocks_of_batch(self, batch_time_ms: int) -> dict[int, list[ReceivedBlockInfo]]:
        reply, _ = await self._call("get_blocks_of_batch", {"batch_time_ms": batch_time_ms})
        return blocks_by_stream(reply["blocks"])

    async def batch_completed(self, batch_info: dict, deleted_through_ms: int | None = None) -> Cleanup:
        """Report a finished batch; ``deleted_through_ms``: the ``through_ms`` of an earlier answer
        whose blocks are deleted now (the tracker forgets those batches)."""
        reply, _ = await self._call(
            "batch_completed", {"batch_info": batch_info, "deleted_through_ms": deleted_through_ms}
        )
        through = reply.get("through_ms")
        return Cleanup([trusted_block(b) for b in reply["deletable"]], through if type(through) is int else None)

    async def list_blocks(
        self, stream_id: int, from_seq: int, until_seq: int | None = None, max_records: int | None = None
    ) -> QueuedBlocks:
        """The stream's queued blocks numbered ``from_seq <= seq < until_seq``, not taken (Structured Streaming)."""
        fields: m.ListBlocksRequest = {"stream_id": stream_id, "from_seq": from_seq}
        if until_seq is not None:
            fields["until_seq"] = until_seq
        if max_records is not None:
            fields["max_records"] = max_records
        reply, _ = await self._call("list_blocks", fields)
        return QueuedBlocks(
            [(seq, trusted_block(b)) for seq, b in zip(reply["seqs"], reply["blocks"])],
            reply["first_seq"],
            reply["next_seq"],
        )

    async def commit_blocks(self, stream_id: int, until_seq: int) -> list[ReceivedBlockInfo]:
        """Drop the stream's queued blocks numbered below ``until_seq``; returns them for deletion."""
        reply, _ = await self._call("commit_blocks", {"stream_id": stream_id, "until_seq": until_seq})
        return [trusted_block(b) for b in reply["deletable"]]

    async def publish_rate(self, stream_id: int, rate: float) -> None:
        await self._call("publish_rate", {"stream_id": stream_id, "rate": float(rate)})

    async def report_error(self, stream_id: int, receiver_id: str, message: str, error: str = "") -> None:
        await self._call(
            "report_error", {"stream_id": stream_id, "receiver_id": receiver_id, "message": message, "error": error}
        )

    async def skip_block(self, stream_id: int, block_id: str, reason: str = "") -> None:
        """Skip a block of a pending batch that cannot be read (the admin role's)."""
        await self._call("skip_block", {"stream_id": stream_id, "block_id": block_id, "reason": reason})

    async def status(self, *, leader: bool = False) -> dict:
        """The tracker's status; ``leader``: the leader's, never a standby's copy (which may lag, or
        be empty while the standby has not read the log): the client moves on to the leader as for
        any request a standby refuses."""
        reply, _ = await self._call("status", {"leader": True} if leader else {})
        reply["streams"] = {int(s): v for s, v in reply["streams"].items()}
        reply["rates"] = {int(s): v for s, v in reply["rates"].items()}
        return reply

    async def __aenter__(self) -> TrackerClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
