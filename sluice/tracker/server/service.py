"""The tracker's operations, as pure synchronous code: request map in, result and pushes out.

The asyncio server (:mod:`sluice.tracker.server.server`) only frames bytes, holds replies until the write-ahead
log says their events are durable, and sends pushes; everything the tracker *decides* is here, so
it is tested without sockets.  Requests reaching :meth:`TrackerService.handle` have passed
:func:`sluice.tracker.wire.protocol.check_request` (field presence and types), which gives each op's
request type (:mod:`sluice.tracker.wire.messages`); values are checked here.

Each op's handler is named in :data:`HANDLERS`, an explicit table whose entries say the request type
they take (checked against the handler's signature by mypy) and which is checked against the
protocol's :data:`~sluice.tracker.wire.protocol.OPS` when this module is imported: an op without a
handler, a handler of no op or one taking another op's request stops the tracker from loading,
rather than answering an op with a ``KeyError`` at run time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NotRequired, Protocol, TypedDict, TypeVar, cast

from sluice.block_info import InvalidMessage, ReceivedBlockInfo, block_id_prefix
from sluice.clock import Clock
from sluice.errors import InvalidArgument
from sluice.settings import TrackerSettings, with_overrides
from sluice.stages import TRACKED, now_ms, stamped
from sluice.storage.block_store import BlockStoreError, LocationRefused, check_location, store_root
from sluice.tracker.log.events import (
    BlockSkipped,
    Event,
    EventLog,
    NullLog,
    RateUpdated,
    ReceiverDeregistered,
    ReceiverRegistered,
    event_from_wire,
)
from sluice.tracker.server.auth import OPEN, Grant
from sluice.tracker.server.lag import stream_lags
from sluice.tracker.server.limits import Busy, ErrorReports, Forbidden, LimitReached
from sluice.tracker.server.metrics import ERROR_REPORTS, LOCATIONS_REFUSED
from sluice.tracker.server.metrics import forget_stream as forget_stream_metrics
from sluice.tracker.server.received_block_tracker import ReceivedBlockTracker, TrackerSnapshot
from sluice.tracker.server.registry import Push, ReceiverInfo, ReceiverRegistry, RegistrySnapshot
from sluice.tracker.server.skips import Skips
from sluice.tracker.server.status import status
from sluice.tracker.wire import messages as m
from sluice.tracker.wire.allocation_reply import encode_columns
from sluice.tracker.wire.protocol import OPS, Op
from sluice.tracker.wire.schema import MAX_TIME_MS

log = logging.getLogger(__name__)


class NotRegistered(InvalidMessage):
    """A request about a stream no registered receiver feeds, or a receiver this connection does not
    hold (the client registers and retries)."""


class BlockStoreRefused(InvalidMessage):
    """register_receiver from a receiver whose block store is not the tracker's: every block it sent
    would be refused, so it is told at registration, with the tracker's stores (``roots``)."""

    def __init__(self, message: str, roots: Sequence[str]) -> None:
        super().__init__(message)
        self.roots = list(roots)


def _root_or_none(url: str) -> str | None:
    """``url`` as :func:`store_root` gives it, or ``None`` when it is not a store URL at all."""
    try:
        return store_root(url)
    except BlockStoreError:  # a malformed URL is one no tracker store matches
        return None


class Peer(Protocol):
    """What the service reads of the connection a request came on (the server's ``Connection``);
    registrations hold it by identity, to push to it."""

    @property
    def role(self) -> str: ...

    @property
    def grant(self) -> Grant: ...


def grant_of(conn: Peer | None) -> tuple[str, Grant]:
    """A connection's role and grant; ``None`` (an in-process caller) is trusted as ``admin``."""
    return ("admin", OPEN) if conn is None else (conn.role, conn.grant)


class ServiceSnapshot(TypedDict):
    """The state a log's snapshot holds (version 1); ``skipped`` only while a block is skipped."""

    version: int
    tracker: TrackerSnapshot
    registry: RegistrySnapshot
    skipped: NotRequired[list[m.SkippedBlock]]


class TrackerService:
    """ReceivedBlockTracker + ReceiverRegistry behind the protocol's ops.

    :param log_: where events are written before they take effect; ``None``: no log.
    :param settings: ``remember_ms`` (completed batches older than this are cleaned up, their blocks
        deletable), ``liveness_timeout_ms`` (a receiver silent this long is dead), ``rate_split``
        (``equal``, or by reported ``lag``) and ``max_batch_ahead_ms`` (``allocate_blocks`` refuses a
        batch time further past the clock); default the schema's (:class:`~sluice.settings.TrackerSettings`).
    :param clock: for liveness (a ``ManualClock`` in tests).
    :param block_stores: the store URLs block locations must lie in; empty: any store URL, the
        location still shaped ``<store>/stream-<id>/<block_id>.blk`` (in-process callers only:
        ``sluice-tracker`` always gives ``tracker.block_store``, the receivers' default unless set).
    :param overrides: fields of ``settings`` given one by one (``remember_ms=1000``).
    """

    def __init__(
        self,
        log_: EventLog | None = None,
        *,
        settings: TrackerSettings | None = None,
        clock: Clock | None = None,
        block_stores: Sequence[str] = (),
        **overrides: object,
    ) -> None:
        s = with_overrides(settings or TrackerSettings(), overrides, "TrackerService")
        self.settings = s
        self.tracker = ReceivedBlockTracker(log_)
        self.log: EventLog = log_ or NullLog()
        self.skips = Skips()
        self.registry = ReceiverRegistry(
            log_=log_,
            clock=clock,
            liveness_timeout_ms=s.liveness_timeout_ms,
            rate_split=s.rate_split,
            max_receivers=s.max_receivers,
        )
        self.error_reports = ErrorReports(s.error_reports_per_minute)
        self.remember_ms = s.remember_ms
        self.block_stores = tuple(store_root(url) for url in block_stores)
        self.max_batch_ahead_ms = s.max_batch_ahead_ms
        self.leadership: Callable[[], m.Leadership] | None = None  # who leads a shared log, for status
        self._idle_since: dict[int, float] = {}  # stream -> when it was first seen without receivers or blocks
        self._streams_seen: set[int] = set()  # streams that had a receiver, until forgotten (their metrics too)

    def set_log(self, log_: EventLog) -> None:
        """Switch to the live log once recovery has replayed the old one."""
        self.tracker.log = log_
        self.registry.log = log_
        self.log = log_

    # --- dispatch ----------------------------------------------------------------------------

    def handle(self, op: str, msg: m.Request, conn: Peer | None = None) -> tuple[object, list[Push]]:
        """Run one request checked by :func:`~sluice.tracker.wire.protocol.check_request` (of the
        op's request type); raises InvalidMessage / LogWriteFailed for error replies."""
        return HANDLERS[op].run(self, msg, conn)

    def op_hello(self, msg: m.HelloRequest, conn: Peer | None) -> tuple[m.HelloReply, list[Push]]:
        return {"server": "sluice-tracker"}, []

    def op_register_receiver(
        self, msg: m.RegisterReceiverRequest, conn: Peer | None
    ) -> tuple[m.RegisterReceiverReply, list[Push]]:
        stream_id, receiver_id = msg["stream_id"], msg["receiver_id"]
        _, grant = grant_of(conn)
        if not grant.serves(stream_id):
            raise Forbidden(f"register_receiver: this credential does not serve stream {stream_id}")
        store = msg.get("block_store")
        if store is not None and self.block_stores and _root_or_none(store) not in self.block_stores:
            LOCATIONS_REFUSED.labels("register_receiver").inc()
            raise BlockStoreRefused(
                f"register_receiver: receiver {receiver_id} writes its blocks to {store}, and this tracker "
                f"takes blocks only in {' or '.join(self.block_stores)} (tracker.block_store): give the "
                "receivers and the tracker the same block store",
                self.block_stores,
            )
        registered, queued = self.registry.streams(), self.tracker.stream_ids()
        if stream_id not in registered and stream_id not in queued:
            # the union is counted only near the bound: a registration must not cost O(streams)
            near = len(registered) + len(queued) >= self.settings.max_streams
            if near and len(registered.keys() | queued) >= self.settings.max_streams:
                raise LimitReached(
                    f"register_receiver: tracker.max_streams = {self.settings.max_streams} streams are known"
                )
        share, pushes = self.registry.register(
            stream_id, receiver_id, msg["host"], conn, grant.principal, msg.get("previous_incarnation")
        )
        return {"rate": share, "incarnation": self.registry.receivers[receiver_id].incarnation}, pushes

    def op_deregister_receiver(self, msg: m.DeregisterReceiverRequest, conn: Peer | None) -> tuple[None, list[Push]]:
        return None, self.registry.deregister(msg["receiver_id"], msg.get("reason", ""), conn)

    def op_heartbeat(self, msg: m.HeartbeatRequest, conn: Peer | None) -> tuple[m.HeartbeatReply, list[Push]]:
        known, pushes = self.registry.heartbeat(
            msg["receiver_id"], msg.get("lag"), conn, msg.get("head_ts_ms"), msg.get("open_transaction_records")
        )
        return {"known": known}, pushes

    def op_add_block(self, msg: m.AddBlockRequest, conn: Peer | None) -> tuple[m.AddBlockReply, list[Push]]:
        info: ReceivedBlockInfo = msg["block"]  # checked by the schema
        self._check_sender(info, conn)
        try:
            check_location(info.location, info.stream_id, info.block_id, self.block_stores)
        except LocationRefused as exc:
            LOCATIONS_REFUSED.labels("add_block").inc()
            raise InvalidMessage(str(exc)) from None
        self._check_bounds(info)
        info = stamped(info, TRACKED, now_ms())  # where the block's time goes: sluice.stages
        result = self.tracker.add_block(info)
        # The block goes back only when it differs from what was sent (trimmed, or an earlier add of
        # the same id): most acks stay a few bytes.
        same = result.info is info or result.info == info
        wire = None if same or result.info is None else self.tracker.wire(result.info)
        return {"accepted": result.accepted, "block": wire}, []

    def _check_sender(self, info: ReceivedBlockInfo, conn: Peer | None) -> None:
        """A receiver connection adds only blocks of a registration it holds, named in its
        incarnation's id space (or the one it superseded under the same credential: a retry across a
        reconnect), or retries one of its receiver's blocks recorded before; an admin (or an
        in-process caller) any block of a registered stream."""
        role, grant = grant_of(conn)
        if not grant.serves(info.stream_id):
            raise Forbidden(f"add_block: this credential does not serve stream {info.stream_id}")
        if role != "receiver":
            if info.stream_id not in self.registry.streams():
                raise NotRegistered(f"add_block: stream {info.stream_id} has no registered receiver; register first")
            return
        held = self.registry.held(info.receiver_id, conn)
        if held is None or held.stream_id != info.stream_id:
            raise NotRegistered(
                f"add_block: this connection holds no registration of receiver {info.receiver_id[:64]} "
                f"on stream {info.stream_id}; register first"
            )
        if self.tracker.is_known(info.block_id) and info.block_id.startswith(
            block_id_prefix(info.stream_id, info.receiver_id)
        ):
            # a retry of a block this tracker recorded gets its first answer, whatever registration
            # it was formed under: refused, its receiver would take it for unrecorded and delete a
            # file a batch still reads (a reply lost in a failover, then two re-registrations)
            return
        # a block sent before a reconnect's registration and retried after it keeps its id
        incarnations = (held.incarnation,) if held.previous is None else (held.incarnation, held.previous)
        prefixes = tuple(block_id_prefix(info.stream_id, info.receiver_id, i) for i in incarnations)
        if not info.block_id.startswith(prefixes):
            raise Forbidden(
                f"add_block: block id {info.block_id[:128]!r} is not of this registration: "
                f"ids must start with {prefixes[0]!r}"
            )

    def op_known_blocks(self, msg: m.KnownBlocksRequest, conn: Peer | None) -> tuple[m.KnownBlocksReply, list[Push]]:
        """Which of a receiver's block ids this tracker holds (queued, or in a batch not yet cleaned
        up): the receiver deletes the files of the others that an earlier run of it left behind."""
        stream_id, receiver_id, ids = msg["stream_id"], msg["receiver_id"], msg["block_ids"]
        role, grant = grant_of(conn)
        if not grant.serves(stream_id):
            raise Forbidden(f"known_blocks: this credential does not serve stream {stream_id}")
        held = self.registry.held(receiver_id, conn)
        if role == "receiver" and (held is None or held.stream_id != stream_id):
            raise NotRegistered(
                f"known_blocks: this connection holds no registration of receiver {receiver_id[:64]} "
                f"on stream {stream_id}; register first"
            )
        prefix = block_id_prefix(stream_id, receiver_id)
        foreign = next((b for b in ids if not b.startswith(prefix)), None)
        if foreign is not None:
            raise Forbidden(
                f"known_blocks: block id {foreign[:128]!r} is not of this receiver: ids start with {prefix!r}"
            )
        return {"known": [b for b in ids if self.tracker.is_known(b)]}, []

    def _check_bounds(self, info: ReceivedBlockInfo) -> None:
        """The stated bounds on one block and on its stream's queue (``tracker.max_*``)."""
        s = self.settings
        if len(info.offset_ranges) > s.max_ranges_per_block:
            raise LimitReached(
                f"add_block: {len(info.offset_ranges)} offset ranges; tracker.max_ranges_per_block = "
                f"{s.max_ranges_per_block}"
            )
        if self.tracker.is_known(info.block_id):
            return  # a retry: answered as before, whatever the queue holds now
        if self.tracker.new_partitions(info) + self.tracker.partitions(info.stream_id) > s.max_partitions_per_stream:
            raise LimitReached(
                f"add_block: stream {info.stream_id} would name more than tracker.max_partitions_per_stream = "
                f"{s.max_partitions_per_stream} topic partitions"
            )
        blocks, records = self.tracker.queued(info.stream_id)
        if blocks and (blocks >= s.max_queued_blocks or records + info.num_records > s.max_queued_records):
            raise Busy(
                f"add_block: stream {info.stream_id} has {blocks} blocks ({records} records) queued; "
                f"bounds tracker.max_queued_blocks = {s.max_queued_blocks}, tracker.max_queued_records = "
                f"{s.max_queued_records}: retry once the driver has taken blocks"
            )

    def op_allocate_blocks(
        self, msg: m.AllocateBlocksRequest, conn: Peer | None
    ) -> tuple[m.AllocateBlocksReply, list[Push]]:
        batch_time_ms = msg["batch_time_ms"]
        ahead = batch_time_ms - self.registry.clock.now_ms()
        if ahead > self.max_batch_ahead_ms:
            raise InvalidMessage(
                f"allocate_blocks.batch_time_ms = {batch_time_ms} is {ahead:.0f} ms past the "
                f"tracker's clock: at most {self.max_batch_ahead_ms} ms ahead is allowed"
            )
        taken = self.tracker.allocate_columns(batch_time_ms, msg.get("max_records"))
        if taken is None:
            return {"allocated": False, "blocks": {}, "last_allocated_ms": self.tracker.last_allocated_ms}, []
        return {"allocated": True, "blocks": encode_columns(list(taken), list(taken.values()))}, []

    def op_get_blocks_of_batch(
        self, msg: m.GetBlocksOfBatchRequest, conn: Peer | None
    ) -> tuple[m.GetBlocksOfBatchReply, list[Push]]:
        allocation = self.skips.without(self.tracker.get_blocks_of_batch(msg["batch_time_ms"]))
        return {"blocks": self.tracker.wire_allocation(allocation)}, []

    def op_skip_block(self, msg: m.SkipBlockRequest, conn: Peer | None) -> tuple[None, list[Push]]:
        event = BlockSkipped(msg["stream_id"], msg["block_id"], msg.get("reason") or "")
        pending = (self.tracker.get_blocks_of_batch(t) for t in self.tracker.pending_batches())
        self.skips.skip(self.log, event, pending)
        log.warning("block %s of stream %d skipped by an operator: %s", event.block_id, event.stream_id, event.reason)
        return None, []

    def op_batch_completed(
        self, msg: m.BatchCompletedRequest, conn: Peer | None
    ) -> tuple[m.BatchCompletedReply, list[Push]]:
        info = msg["batch_info"]
        batch_time = info.get("batch_time_ms")
        if not isinstance(batch_time, int) or isinstance(batch_time, bool) or not 0 <= batch_time <= MAX_TIME_MS:
            raise InvalidMessage(f"batch_completed.batch_info.batch_time_ms must be an integer from 0 to {MAX_TIME_MS}")
        self.tracker.batch_completed(batch_time, info)
        threshold = batch_time - self.remember_ms
        deleted_through_ms = msg.get("deleted_through_ms")
        if deleted_through_ms is not None:  # those blocks are gone: forget their batches
            gone = self.tracker.cleanup_old_batches(min(deleted_through_ms + 1, threshold), completed_only=True)
            self.skips.forget(gone)
        cleanable = self.tracker.cleanable_batches(threshold)
        return {
            "deletable": [self.tracker.wire(b) for blocks in cleanable.values() for b in blocks],
            "through_ms": max(cleanable) if cleanable else None,
        }, []

    def op_list_blocks(self, msg: m.ListBlocksRequest, conn: Peer | None) -> tuple[m.ListBlocksReply, list[Push]]:
        stream_id, from_seq, until_seq = msg["stream_id"], msg["from_seq"], msg.get("until_seq")
        max_records = msg.get("max_records")
        if max_records is not None and max_records < 1:
            raise InvalidMessage(f"list_blocks.max_records must be 1 or more, got {max_records}")
        found = self.tracker.list_blocks(stream_id, from_seq, until_seq, max_records)
        first_seq, next_seq = self.tracker.seq_bounds(stream_id)
        return {
            "blocks": [self.tracker.wire(b) for _, b in found],
            "seqs": [seq for seq, _ in found],
            "first_seq": first_seq,
            "next_seq": next_seq,
        }, []

    def op_commit_blocks(self, msg: m.CommitBlocksRequest, conn: Peer | None) -> tuple[m.CommitBlocksReply, list[Push]]:
        deletable = self.tracker.commit_blocks(msg["stream_id"], msg["until_seq"])
        return {"deletable": [b.to_wire() for b in deletable]}, []

    def op_publish_rate(self, msg: m.PublishRateRequest, conn: Peer | None) -> tuple[m.PublishRateReply, list[Push]]:
        shares, pushes = self.registry.publish_rate(msg["stream_id"], float(msg["rate"]))
        return {"shares": shares}, pushes

    def op_report_error(self, msg: m.ReportErrorRequest, conn: Peer | None) -> tuple[None, list[Push]]:
        """Kept as the receiver's last error; logged within its budget (``tracker.error_reports_per_minute``)."""
        receiver_id = msg["receiver_id"]
        if self.registry.held(receiver_id, conn) is None:
            ERROR_REPORTS.labels("not_held").inc()
            return None, []
        self.registry.report_error(receiver_id, msg["message"], msg.get("error", ""), conn)
        if not self.error_reports.allow(receiver_id):
            ERROR_REPORTS.labels("suppressed").inc()
            return None, []
        ERROR_REPORTS.labels("logged").inc()
        log.warning(
            "receiver %s of stream %s reports: %s %s",
            receiver_id[:256],
            msg["stream_id"],
            msg["message"][:2000],
            msg.get("error", "")[:2000],
        )
        return None, []

    def op_status(self, msg: m.StatusRequest, conn: Peer | None) -> tuple[m.StatusReply, list[Push]]:
        role, _ = grant_of(conn)
        return self.status(self.registry.of_connection(conn) if role == "receiver" else None), []

    def status(self, own: list[ReceiverInfo] | None = None) -> m.StatusReply:
        """The bounded status view (:mod:`sluice.tracker.server.status`); ``own``: a receiver's registrations."""
        reply = status(self.tracker, self.registry, own)
        if own is None:
            reply["skipped_blocks"] = self.skips.to_wire()
        if self.leadership is not None:  # who leads is every client's business: it finds the leader by it
            reply["leadership"] = self.leadership()
        return reply

    def stream_lags(self) -> dict[int, float]:
        """Each known stream's time behind in seconds (:mod:`sluice.tracker.server.lag`), at the registry's clock."""
        return stream_lags(self.tracker, self.registry, self.registry.clock.now_ms())

    # --- liveness, recovery --------------------------------------------------------------------

    def check_liveness(self) -> list[Push]:
        """Expire silent receivers; forget streams idle for ``remember_ms`` (no receiver, no queued block)."""
        self._streams_seen.update(self.registry.streams())  # before the dead leave
        pushes = self.registry.check_liveness()
        self.error_reports.forget(self.registry.receivers.__contains__)
        now = self.registry.clock.now_ms()
        registered = self.registry.streams()
        counts = self.tracker.unallocated_counts()
        for s in set(counts) | self._streams_seen:
            blocks = counts.get(s, (0, 0))[0]
            if blocks or s in registered:
                self._idle_since.pop(s, None)
            elif now - self._idle_since.setdefault(s, now) >= self.remember_ms:
                self._idle_since.pop(s)
                self._streams_seen.discard(s)
                dropped = self.tracker.forget_stream(s, self.settings.max_streams)
                forget_stream_metrics(s)
                log.info("stream %d forgotten: no receiver and no unallocated block for %d ms", s, self.remember_ms)
                if dropped:
                    log.warning(
                        "offset marks of idle stream(s) %s dropped: more than tracker.max_streams = %d idle streams "
                        "kept theirs; a receiver of those re-reading offsets it did not commit would queue them again",
                        dropped,
                        self.settings.max_streams,
                    )
        return pushes

    def apply(self, event: Event) -> None:
        """Replay one WAL event into whichever part owns it."""
        match event:
            case RateUpdated() | ReceiverRegistered() | ReceiverDeregistered():
                self.registry.apply(event)
            case BlockSkipped():
                self.skips.apply(event)
            case _:
                self.tracker.apply(event)

    def recover(self, snapshot: object, events: Iterable[object]) -> None:
        """Load what the log held at start: its snapshot (or None), then its events as stored
        (msgpack as read back, checked here)."""
        if snapshot is not None:
            self.restore(snapshot)
        for event in events:
            self.apply(event_from_wire(event))

    def snapshot(self) -> ServiceSnapshot:
        """The state the log rolls into a snapshot (said in the log: a standby that takes over
        later says what it loaded, and the two lines can be compared)."""
        log.info("snapshot of the state: %s", self.tracker.describe())
        snap: ServiceSnapshot = {"version": 1, "tracker": self.tracker.snapshot(), "registry": self.registry.snapshot()}
        if self.skips.reasons:
            snap["skipped"] = self.skips.to_wire()
        return snap

    def restore(self, stored: object) -> None:
        """Load a snapshot as the log read it back: :meth:`snapshot`'s map, whose CRC the log checked."""
        version = stored.get("version") if isinstance(stored, dict) else None
        if version != 1:
            raise InvalidMessage(f"snapshot version {version!r} is not supported (expected 1)")
        snap = cast(ServiceSnapshot, stored)  # version 1's shape, as snapshot() wrote it
        self.tracker.restore(snap["tracker"])
        self.registry.restore(snap["registry"])
        self.skips.restore(snap.get("skipped", ()))


# --- the handler table ---------------------------------------------------------------------------

R = TypeVar("R")  # one op's request type


@dataclass(frozen=True)
class Handler(Generic[R]):
    """One op's handler and the request type it takes (the op's :attr:`Op.request`)."""

    request: type[R]
    run: Callable[[TrackerService, R, Peer | None], tuple[object, list[Push]]]


def handler(
    request: type[R], run: Callable[[TrackerService, R, Peer | None], tuple[object, list[Push]]]
) -> Handler[Any]:
    """A table entry; built by a function so mypy checks ``run`` takes ``request`` (a constructor
    called where a ``Handler[Any]`` is expected would infer ``Any`` and check nothing)."""
    return Handler(request, run)


# one request type per handler: no single type argument fits the table, so its entries are Handler[Any]
HANDLERS: dict[str, Handler[Any]] = {
    "hello": handler(m.HelloRequest, TrackerService.op_hello),
    "register_receiver": handler(m.RegisterReceiverRequest, TrackerService.op_register_receiver),
    "deregister_receiver": handler(m.DeregisterReceiverRequest, TrackerService.op_deregister_receiver),
    "heartbeat": handler(m.HeartbeatRequest, TrackerService.op_heartbeat),
    "add_block": handler(m.AddBlockRequest, TrackerService.op_add_block),
    "known_blocks": handler(m.KnownBlocksRequest, TrackerService.op_known_blocks),
    "allocate_blocks": handler(m.AllocateBlocksRequest, TrackerService.op_allocate_blocks),
    "get_blocks_of_batch": handler(m.GetBlocksOfBatchRequest, TrackerService.op_get_blocks_of_batch),
    "batch_completed": handler(m.BatchCompletedRequest, TrackerService.op_batch_completed),
    "list_blocks": handler(m.ListBlocksRequest, TrackerService.op_list_blocks),
    "commit_blocks": handler(m.CommitBlocksRequest, TrackerService.op_commit_blocks),
    "publish_rate": handler(m.PublishRateRequest, TrackerService.op_publish_rate),
    "report_error": handler(m.ReportErrorRequest, TrackerService.op_report_error),
    "skip_block": handler(m.SkipBlockRequest, TrackerService.op_skip_block),
    "status": handler(m.StatusRequest, TrackerService.op_status),
}


def check_handlers(handlers: Mapping[str, Handler[Any]], ops: Mapping[str, Op]) -> None:
    """Every op of ``ops`` has exactly one handler in ``handlers``, taking the op's request type."""
    problems = [f"op {name} has no handler" for name in ops if name not in handlers]
    problems += [f"handler {name} answers no op of the protocol" for name in handlers if name not in ops]
    problems += [
        f"handler {name} takes {h.request.__name__}, but the protocol's {name} request is {ops[name].request.__name__}"
        for name, h in handlers.items()
        if name in ops and h.request is not ops[name].request
    ]
    if problems:
        raise InvalidArgument(
            f"the tracker's handler table does not match its protocol: {'; '.join(problems)}; every op in "
            "sluice.tracker.wire.protocol.OPS needs one entry in sluice.tracker.server.service.HANDLERS"
        )


check_handlers(HANDLERS, OPS)
