"""The typed shape of every tracker request once :func:`~sluice.tracker.wire.protocol.check_request`
has checked it, and of every reply a handler gives.  Pure declarations.

A request arrives as a msgpack map, ``dict[str, object]``, and means nothing until checked; the
check (each field's :class:`~sluice.tracker.wire.schema.Field`) returns one of these, holding only
the op's fields, each of its checked type (``add_block.block`` a ``ReceivedBlockInfo``,
``allocate_blocks.max_records`` a map of stream to records).  A field the schema marks optional is
``NotRequired``.  :data:`~sluice.tracker.wire.protocol.OPS` names each op's request type, and the
service's handler table (:mod:`sluice.tracker.server.service`) is checked against it at import.

The replies are what the handlers return as ``ok``; the block maps inside them are
``ReceivedBlockInfo.to_wire()`` maps, typed where they are built.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from sluice.block_info import ReceivedBlockInfo
from sluice.tracker.wire.allocation_reply import AllocationColumns

WireMap = dict[str, Any]
"""A map built for the wire from a typed value (a block's ``to_wire()``), or a free-form map the
schema bounded (a batch's info).  Its values are any msgpack value (a block's metadata is the
receiver's own), hence ``Any``."""

# --- requests -------------------------------------------------------------------------------------


class HelloRequest(TypedDict):
    version: int
    role: str
    token: NotRequired[str | None]


class RegisterReceiverRequest(TypedDict):
    stream_id: int
    receiver_id: str
    host: str
    previous_incarnation: NotRequired[int]
    block_store: NotRequired[str]


class DeregisterReceiverRequest(TypedDict):
    receiver_id: str
    reason: NotRequired[str]


class HeartbeatRequest(TypedDict):
    receiver_id: str
    lag: NotRequired[int | None]
    head_ts_ms: NotRequired[int | None]
    open_transaction_records: NotRequired[int | None]


class AddBlockRequest(TypedDict):
    block: ReceivedBlockInfo


class KnownBlocksRequest(TypedDict):
    stream_id: int
    receiver_id: str
    block_ids: list[str]


class AllocateBlocksRequest(TypedDict):
    batch_time_ms: int
    max_records: NotRequired[dict[int, int]]


class GetBlocksOfBatchRequest(TypedDict):
    batch_time_ms: int


class BatchCompletedRequest(TypedDict):
    batch_info: dict[str, object]  # bounded by the schema; its fields are the service's to check
    deleted_through_ms: NotRequired[int | None]


class ListBlocksRequest(TypedDict):
    stream_id: int
    from_seq: int
    until_seq: NotRequired[int | None]
    max_records: NotRequired[int | None]


class CommitBlocksRequest(TypedDict):
    stream_id: int
    until_seq: int


class PublishRateRequest(TypedDict):
    stream_id: int
    rate: float


class ReportErrorRequest(TypedDict):
    stream_id: int
    receiver_id: str
    message: str
    error: NotRequired[str]


class SkipBlockRequest(TypedDict):
    stream_id: int
    block_id: str
    reason: NotRequired[str]


class StatusRequest(TypedDict):
    leader: NotRequired[bool]  # true: a standby refuses it (not_leader) instead of answering from its copy


Request = (
    HelloRequest
    | RegisterReceiverRequest
    | DeregisterReceiverRequest
    | HeartbeatRequest
    | AddBlockRequest
    | KnownBlocksRequest
    | AllocateBlocksRequest
    | GetBlocksOfBatchRequest
    | BatchCompletedRequest
    | ListBlocksRequest
    | CommitBlocksRequest
    | PublishRateRequest
    | ReportErrorRequest
    | SkipBlockRequest
    | StatusRequest
)

# --- replies (``ok``; ``None`` for the ops whose reply is nil) -------------------------------------


class HelloReply(TypedDict):
    server: str


class RegisterReceiverReply(TypedDict):
    rate: float | None
    incarnation: int


class HeartbeatReply(TypedDict):
    known: bool


class AddBlockReply(TypedDict):
    accepted: bool
    block: WireMap | None


class KnownBlocksReply(TypedDict):
    known: list[str]


class AllocateBlocksReply(TypedDict):
    allocated: bool
    blocks: AllocationColumns | dict[str, object]  # the columns; an empty map when not allocated
    last_allocated_ms: NotRequired[int | None]


class GetBlocksOfBatchReply(TypedDict):
    blocks: dict[int, list[WireMap]]


class BatchCompletedReply(TypedDict):
    deletable: list[WireMap]
    through_ms: int | None


class ListBlocksReply(TypedDict):
    blocks: list[WireMap]
    seqs: list[int]
    first_seq: int
    next_seq: int


class CommitBlocksReply(TypedDict):
    deletable: list[WireMap]


class PublishRateReply(TypedDict):
    shares: dict[str, float]


class StreamStatus(TypedDict):
    unallocated_blocks: int
    unallocated_records: int
    rate: float | None
    receivers: list[str]  # the first ids, at most MAX_LISTED_PER_STREAM (receiver_count says how many)
    receiver_count: int


class ReceiverStatus(TypedDict):
    """A receiver as the status reply lists it."""

    receiver_id: str
    stream_id: int
    host: str
    incarnation: int
    live: bool
    lag: int | None
    head_ts_ms: int | None
    open_transaction_records: int | None
    rate: float | None
    last_seen_ms: int
    registered_ms: int
    last_error: str


class SkippedBlock(TypedDict):
    """One skip as the snapshot and the status reply hold it."""

    stream_id: int
    block_id: str
    reason: str


class Leadership(TypedDict):
    """Who leads a shared log, as the tracker asked sees it (every client finds the leader by it)."""

    role: str  # leader | standby
    node: str
    leader: str | None
    leader_since_ms: int | None
    log_position: int
    unreadable: list[str]


class StatusReply(TypedDict):
    """The bounded status view (:mod:`sluice.tracker.server.status`), documented with the op."""

    streams: dict[int, StreamStatus]
    stream_count: int
    receivers: dict[str, ReceiverStatus]
    receiver_count: int
    last_allocated_batch_ms: int | None
    pending_batches: list[int]
    rates: dict[int, float]
    skipped_blocks: NotRequired[list[SkippedBlock]]  # not in a receiver's view
    leadership: NotRequired[Leadership]  # a tracker on a shared log
