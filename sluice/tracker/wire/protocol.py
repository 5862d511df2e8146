"""The tracker's wire protocol: every message type, defined once (the framing is :mod:`sluice.tracker.wire.framing`).

A frame is a 4-byte big-endian length followed by exactly one msgpack map of that many bytes.
Requests carry ``op`` and an integer ``id``; a reply carries the same ``id`` and either ``ok``
(the result) or ``error: {code, message}``.  Pushes from the tracker (``update_rate``, ``stop``)
carry ``op`` and no ``id``.  The first frame on a connection must be ``hello``, and a client waits
for its reply before sending more: until then frames are held to the small pre-hello limit.

Everything a peer sends is hostile until checked: the frame length is bounded before any byte of
the payload is buffered, msgpack's own unpack limits bound every string, binary, array and map,
and :func:`check_request` checks each field against its schema (:mod:`sluice.tracker.wire.schema`: types,
bounds, depth) before a handler sees the map or anything reaches the write-ahead log.  Frames that
fail get an error reply (when the framing is still intact) or a closed connection (when it is not),
never an exception that escapes the connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from sluice.block_info import MAX_INT, InvalidMessage
from sluice.config import MAX_TOKEN
from sluice.errors import SluiceError
from sluice.tracker.wire import messages as m
from sluice.tracker.wire.framing import CLIENT_LIMITS as CLIENT_LIMITS
from sluice.tracker.wire.framing import DEFAULT_LIMITS as DEFAULT_LIMITS
from sluice.tracker.wire.framing import DEFAULT_MAX_FRAME as DEFAULT_MAX_FRAME
from sluice.tracker.wire.framing import HEADER as HEADER
from sluice.tracker.wire.framing import BadFrame as BadFrame
from sluice.tracker.wire.framing import FrameDecoder as FrameDecoder
from sluice.tracker.wire.framing import FrameTooLarge as FrameTooLarge
from sluice.tracker.wire.framing import Limits as Limits
from sluice.tracker.wire.framing import encode as encode
from sluice.tracker.wire.framing import pack as pack
from sluice.tracker.wire.schema import (
    MAX_BATCH_INFO_BYTES,
    MAX_STREAM_ID,
    MAX_TEXT,
    MAX_TIME_MS,
    Block,
    Bool,
    Field,
    Int,
    MaxRecords,
    Rate,
    Str,
    Strs,
    Tree,
)

MAX_KNOWN_BLOCKS = 1000  # block ids one known_blocks asks about

# 2: allocate_blocks replies in columns (sluice/tracker/wire/allocation_reply.py); 3: batch_completed forgets
# cleaned batches only once the driver says it deleted their blocks (deleted_through_ms); 4: the
# allocation's integer columns are little-endian bins, one column per range field; 5: the tracker
# assigns incarnations, a receiver's blocks are of the registration its connection holds, busy/limit
PROTOCOL_VERSION = 5

ROLES = ("receiver", "driver", "admin")

# Error codes of ``error.code``; a client decides on them whether to retry.
E_BAD_FRAME = "bad_frame"  # undecodable payload or not a map
E_TOO_LARGE = "frame_too_large"  # length over the limit (connection is closed after)
E_UNKNOWN_OP = "unknown_op"
E_INVALID = "invalid"  # a field is missing or has the wrong type/value
E_HELLO_REQUIRED = "hello_required"
E_VERSION = "unsupported_version"
E_UNAUTHORIZED = "unauthorized"  # hello: wrong token, or a role the credential does not give
E_FORBIDDEN = "forbidden"  # a request the connection's role may not send
E_NOT_REGISTERED = "not_registered"  # add_block of a stream no registered receiver feeds: register, retry
E_UNAVAILABLE = "unavailable"  # the tracker cannot make the request durable now (retry)
E_BUSY = "busy"  # add_block: the stream's queue is at its bound (wait, retry)
E_LIMIT = "limit"  # a stated bound on the tracker's state (tracker.max_*) refuses the request
E_INTERNAL = "internal"
E_NOT_LEADER = "not_leader"  # a standby, or a deposed leader: the error's ``leader`` names who leads, if known
RETRYABLE = frozenset({E_UNAVAILABLE, E_BUSY})


RECEIVER = ("receiver", "admin")  # a receiver token's ops (a full-access token may do everything)
DRIVER = ("driver", "admin")  # a driver token's ops
ANY = ROLES
ADMIN = ("admin",)  # an operator's ops


@dataclass(frozen=True)
class Op:
    """One request type, declared once: its fields, who may send it, and what ``ok`` holds.

    :param fields: name -> :class:`~sluice.tracker.wire.schema.Field` (type, bounds, required).
    :param roles: the roles a connection must hold (from its credential) to send it.
    :param mutates: writes a WAL event, so its reply waits for the fsync.
    :param request: the :mod:`~sluice.tracker.wire.messages` type :func:`check_request` returns for
        it (one key per field, of its checked type); the service's handler for it takes that type.
    """

    name: str
    fields: dict[str, Field]
    reply: str
    doc: str
    roles: tuple[str, ...]
    mutates: bool = False
    request: type = field(kw_only=True)


OPS: dict[str, Op] = {
    o.name: o
    for o in (
        Op(
            "hello",
            {"version": Int(0, 2**31), "role": Str(32), "token": Str(MAX_TOKEN, min_len=0, nullable=True).optional()},
            "{version, server}",
            "First frame of every connection: protocol version, the peer's role, the auth token when the "
            "tracker has tokens (compared in constant time). The role must be one the token (or client "
            "certificate) allows; a wrong token, role or version closes the connection.",
            ANY,
            request=m.HelloRequest,
        ),
        Op(
            "register_receiver",
            {
                "stream_id": Int(0, MAX_STREAM_ID),
                "receiver_id": Str(),
                "host": Str(),
                "previous_incarnation": Int(0, MAX_INT).optional(),
                "block_store": Str(MAX_TEXT).optional(),
            },
            "{rate: float|None, incarnation: int}: the receiver's current share of its stream's rate, and the "
            "incarnation the tracker gave this registration",
            "A receiver (re)starting, on a stream its credential serves. Binds the receiver to this connection "
            "for update_rate/stop pushes, add_block, heartbeat, report_error and deregister_receiver. A receiver "
            "id registered under another credential is refused (forbidden) until it leaves or its liveness times "
            "out; under the same credential the old connection gets stop. previous_incarnation: the one the "
            "receiver held before a reconnect; a tracker that does not know the id (restarted, or a standby "
            "that took over) takes blocks of that incarnation too, so a block re-sent after the lost reply "
            "keeps its id and is deduplicated. New ids past tracker.max_receivers and "
            "new streams past tracker.max_streams are refused (limit). block_store: the URL of the store the "
            "receiver writes its blocks to; one outside tracker.block_store is refused (invalid, the error's "
            "block_stores naming the tracker's), since every block it sent would be refused.",
            RECEIVER,
            request=m.RegisterReceiverRequest,
        ),
        Op(
            "deregister_receiver",
            {"receiver_id": Str(), "reason": Str(MAX_TEXT, min_len=0).optional()},
            "nil",
            "A receiver stopping; its stream's rate is split again among the others. Only the connection "
            "holding the registration may (forbidden otherwise).",
            RECEIVER,
            request=m.DeregisterReceiverRequest,
        ),
        Op(
            "heartbeat",
            {
                "receiver_id": Str(),
                "lag": Int(-MAX_INT, MAX_INT, nullable=True).optional(),
                "head_ts_ms": Int(0, MAX_TIME_MS, nullable=True).optional(),
                "open_transaction_records": Int(0, MAX_INT, nullable=True).optional(),
            },
            "{known: bool}",
            "Liveness plus the records the receiver is behind (Kafka lag); known=False (unknown, or not held by "
            "this connection) asks it to register. head_ts_ms (optional, with lag > 0): the Kafka timestamp of "
            "the last record the receiver took, so the next one still in Kafka is at most that old; it feeds "
            "sluice_stream_lag_seconds and is ignored when lag is 0 or absent. open_transaction_records (optional, "
            "read_committed readers): records past the partitions' last stable offsets, held back by open "
            "transactions; shown beside the lag, which is counted to the last stable offset.",
            RECEIVER,
            request=m.HeartbeatRequest,
        ),
        Op(
            "add_block",
            {"block": Block()},
            "{accepted: bool, block: ReceivedBlockInfo wire map | nil (nil: recorded exactly as sent)}",
            "A durably stored block (ReceivedBlockInfo wire map), its location inside the tracker's block store. "
            "A receiver connection must hold the registration of the block's receiver_id on its stream "
            "(not_registered otherwise) and the id must start with input-<stream>-<receiver>-<incarnation>- "
            "(forbidden otherwise); an admin needs a registered receiver on the stream. Logged (BlockAdded) "
            "and fsynced before the reply. accepted=False: every offset was already added (dropped as a "
            "duplicate). A block id seen before gets the first answer again (idempotent retries). More than "
            "tracker.max_ranges_per_block ranges, or new partitions past tracker.max_partitions_per_stream: "
            "limit. The stream's queue at tracker.max_queued_blocks or max_queued_records: busy (retry later).",
            RECEIVER,
            mutates=True,
            request=m.AddBlockRequest,
        ),
        Op(
            "known_blocks",
            {"stream_id": Int(0, MAX_STREAM_ID), "receiver_id": Str(), "block_ids": Strs(MAX_KNOWN_BLOCKS)},
            "{known: [block id]}: those of block_ids the tracker holds",
            "Which of a receiver's block ids (each starting with input-<stream>-<receiver>-; forbidden "
            "otherwise, at most 1,000) the tracker holds: queued, or in a batch not yet cleaned up. A receiver "
            "connection must hold the receiver's registration (not_registered otherwise). A receiver asks it "
            "about the block files an earlier run of it stored and never reported, and deletes the others "
            "once receiver.orphan_grace_ms old. Added within version 5: a tracker without it answers "
            "unknown_op, and the receiver then keeps the files.",
            RECEIVER,
            request=m.KnownBlocksRequest,
        ),
        Op(
            "allocate_blocks",
            {"batch_time_ms": Int(0, MAX_TIME_MS), "max_records": MaxRecords().optional()},
            "{allocated: bool, blocks: columns (streams, blocks_per_stream, block_ids, ...; integer columns as "
            "little-endian bins; sluice/tracker/wire/allocation_reply.py)}",
            "Take each stream's unallocated blocks into this batch (BatchAllocated, with the ids taken, "
            "logged first). max_records [[stream_id, records >= 1], ...] bounds the streams it names: "
            "queued blocks are taken in order while their records fit, at least one, and the rest wait for "
            "the next batches (without it, or for a stream it does not name, every queued block is taken). "
            "allocated=False when batch_time_ms is not later than the last allocated batch; a batch time "
            "more than tracker.max_batch_ahead_ms past the tracker's clock is refused (invalid).",
            DRIVER,
            mutates=True,
            request=m.AllocateBlocksRequest,
        ),
        Op(
            "get_blocks_of_batch",
            {"batch_time_ms": Int(0, MAX_TIME_MS)},
            "{blocks: {stream_id: [block wire map]}}",
            "The blocks an earlier allocate_blocks gave this batch (empty when unknown).",
            DRIVER,
            request=m.GetBlocksOfBatchRequest,
        ),
        Op(
            "batch_completed",
            {
                "batch_info": Tree(MAX_BATCH_INFO_BYTES),
                "deleted_through_ms": Int(0, MAX_TIME_MS, nullable=True).optional(),
            },
            "{deletable: [block wire map], through_ms: int | nil}",
            "BatchInfo.to_wire() of a finished batch (BatchCompleted logged). deletable: the blocks of the "
            "completed batches older than tracker.remember_ms before it, through_ms the newest of those "
            "batches. They are forgotten (BatchCleanup logged) only when a later call's deleted_through_ms "
            "says the driver deleted their blocks, so a driver killed before deleting is told again.",
            DRIVER,
            mutates=True,
            request=m.BatchCompletedRequest,
        ),
        Op(
            "list_blocks",
            {
                "stream_id": Int(0, MAX_STREAM_ID),
                "from_seq": Int(),
                "until_seq": Int(nullable=True).optional(),
                "max_records": Int(1, nullable=True).optional(),
            },
            "{blocks: [block wire map], seqs: [int], first_seq: int, next_seq: int}",
            "Structured Streaming: the stream's queued blocks numbered from_seq <= seq < until_seq (no bound "
            "when nil), in order, without taking them; max_records >= 1 keeps the head whose records fit (at "
            "least one block). first_seq is the oldest queued block's number, next_seq the number the next "
            "block gets (equal when none is queued).",
            DRIVER,
            request=m.ListBlocksRequest,
        ),
        Op(
            "commit_blocks",
            {"stream_id": Int(0, MAX_STREAM_ID), "until_seq": Int()},
            "{deletable: [block wire map]}",
            "Structured Streaming's commit(end): the stream's queued blocks numbered below until_seq leave the "
            "queue for good (BlocksCommitted logged first); they come back for the caller to delete. "
            "Committing what is already gone changes nothing.",
            DRIVER,
            mutates=True,
            request=m.CommitBlocksRequest,
        ),
        Op(
            "publish_rate",
            {"stream_id": Int(0, MAX_STREAM_ID), "rate": Rate()},
            "{shares: {receiver_id: rate}}",
            "The estimator's new rate for a stream (RateUpdated logged); split among live receivers and "
            "pushed to each as update_rate.",
            DRIVER,
            mutates=True,
            request=m.PublishRateRequest,
        ),
        Op(
            "report_error",
            {
                "stream_id": Int(0, MAX_STREAM_ID),
                "receiver_id": Str(),
                "message": Str(MAX_TEXT, min_len=0),
                "error": Str(MAX_TEXT, min_len=0).optional(),
            },
            "nil",
            "A receiver's error, kept as its last_error in status and logged at most "
            "tracker.error_reports_per_minute times a minute per receiver (the rest counted). Ignored unless "
            "this connection holds the receiver's registration.",
            RECEIVER,
            request=m.ReportErrorRequest,
        ),
        Op(
            "skip_block",
            {"stream_id": Int(0, MAX_STREAM_ID), "block_id": Str(), "reason": Str(MAX_TEXT, min_len=0).optional()},
            "nil",
            "An operator skips a block of a pending batch that cannot be read (BlockSkipped logged): "
            "get_blocks_of_batch leaves it out from then on, so a restarted driver re-runs the batch "
            "without it. Listed in status as skipped_blocks until its batch is cleaned up.",
            ADMIN,
            mutates=True,
            request=m.SkipBlockRequest,
        ),
        Op(
            "status",
            {"leader": Bool().optional()},
            "{streams: {stream_id: {unallocated_blocks, unallocated_records, rate, receivers: [id], "
            "receiver_count}}, stream_count, receivers: {id: {receiver_id, stream_id, host, incarnation, live, "
            "lag, head_ts_ms, open_transaction_records, rate, last_seen_ms, registered_ms, last_error}}, "
            "receiver_count, "
            "last_allocated_batch_ms, pending_batches: [ms ascending], rates: {stream_id: rate}, "
            "skipped_blocks: [{stream_id, block_id, reason}] (full view only)}",
            "Streams (unallocated blocks/records, rate, receivers), receivers, last allocated batch, "
            "pending batches (allocated, not completed) and the last published rates. Lists are cut at 1,000 "
            "entries (100 receiver ids per stream), the counts say how many there are. A receiver connection "
            "sees only the registrations it holds and their streams. A standby answers too, from its copy of the "
            "log, which may lag or, while it has not read the log yet, be empty; with leader = true it refuses "
            "with not_leader instead, so what a driver recovers from (pending batches, rates) is the leader's.",
            ANY,
            request=m.StatusRequest,
        ),
    )
}

# Pushes: tracker -> receiver over the connection the receiver registered on (no id, no reply).
# update_rate {op, stream_id, receiver_id, rate}: the receiver's new share of its stream's rate, sent
#   after publish_rate, when a receiver of the stream joins, leaves or dies, and (rate_split = "lag")
#   when the lags move the share by more than 5%.
# stop {op, receiver_id, reason}: the receiver id registered again elsewhere with a newer incarnation.
PUSH_UPDATE_RATE = "update_rate"
PUSH_STOP = "stop"


def check_request(msg: dict[str, object]) -> tuple[Op, int, m.Request]:
    """The request's :class:`Op`, its id and its fields, each checked against its schema: the
    op's :attr:`Op.request` type, holding only the fields present (``add_block.block`` a
    ReceivedBlockInfo), never ``op`` or ``id``.

    Raises :class:`InvalidMessage` naming the bad field, :class:`UnknownOp` for an op not in :data:`OPS`.
    """
    rid = msg.get("id")
    if not isinstance(rid, int) or isinstance(rid, bool):
        raise InvalidMessage("request id must be an integer")
    name = msg.get("op")
    if not isinstance(name, str):
        raise InvalidMessage("request op must be a string")
    op = OPS.get(name)
    if op is None:
        raise UnknownOp(f"unknown op {name[:64]!r}; ops are {', '.join(OPS)}")
    checked: dict[str, object] = {}
    for fname, spec in op.fields.items():
        if fname not in msg:
            if spec.required:
                raise InvalidMessage(f"{name}.{fname} is missing")
            continue
        checked[fname] = spec.check(msg[fname], f"{name}.{fname}")
    # every field of op.request is one of op.fields, checked to its type just above
    return op, rid, cast(m.Request, checked)


class UnknownOp(InvalidMessage):
    """An op name the tracker does not serve."""


def ok(rid: int, result: object) -> bytes:
    return encode({"id": rid, "ok": result})


def error(rid: int | None, code: str, message: str, **extra: object) -> bytes:
    return encode({"id": rid, "error": {"code": code, "message": message, **extra}})


@dataclass
class RemoteError(SluiceError):
    """The tracker replied ``error``; retriable by its code (``unavailable``, ``busy``)."""

    code: str
    message: str
    op: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.retriable = self.code in RETRYABLE

    def __str__(self) -> str:
        return f"tracker refused {self.op or 'request'}: {self.code}: {self.message}"
