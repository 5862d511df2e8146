"""The tracker's operations, as pure synchronous code: request map in, result and pushes out.

The asyncio server (:mod:`sluice.tracker.server`) only frames bytes, holds replies until the write-ahead
log says their events are durable, and sends pushes; everything the tracker *decides* is here, so
it is tested without sockets.  Requests reaching :meth:`TrackerService.handle` have passed
:func:`sluice.tracker.protocol.check_request` (field presence and types); values are checked here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from sluice.block_info import InvalidMessage, ReceivedBlockInfo
from sluice.clock import Clock
from sluice.tracker.allocation_reply import encode_allocation
from sluice.tracker.events import Event, EventLog, RateUpdated, event_from_wire
from sluice.tracker.received_block_tracker import ReceivedBlockTracker
from sluice.tracker.registry import Push, ReceiverRegistry

log = logging.getLogger(__name__)


class TrackerService:
    """ReceivedBlockTracker + ReceiverRegistry behind the protocol's ops.

    :param log_: where events are written before they take effect; ``None``: no log.
    :param remember_ms: completed batches older than this are cleaned up (their blocks deletable).
    :param liveness_timeout_ms: a receiver silent this long is dead.
    :param rate_split: how a stream's rate is shared: ``equal`` or by reported ``lag``.
    :param clock: for liveness (a ``ManualClock`` in tests).
    """

    def __init__(self, log_: EventLog | None = None, *, remember_ms: int = 60_000,
                 liveness_timeout_ms: int = 10_000, rate_split: str = "equal",
                 clock: Clock | None = None) -> None:
        self.tracker = ReceivedBlockTracker(log_)
        self.registry = ReceiverRegistry(log_=log_, clock=clock, liveness_timeout_ms=liveness_timeout_ms,
                                         rate_split=rate_split)
        self.remember_ms = remember_ms
        self._handlers = {name[3:]: getattr(self, name) for name in dir(self) if name.startswith("op_")}

    def set_log(self, log_: EventLog) -> None:
        """Switch to the live log once recovery has replayed the old one."""
        self.tracker.log = log_
        self.registry.log = log_

    # --- dispatch ----------------------------------------------------------------------------

    def handle(self, op: str, msg: dict, conn: Any = None) -> tuple[Any, list[Push]]:
        """Run one checked request; raises InvalidMessage / LogWriteFailed for error replies."""
        return self._handlers[op](msg, conn)

    def op_hello(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        return {"server": "sluice-tracker"}, []

    def op_register_receiver(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        share, pushes = self.registry.register(msg["stream_id"], msg["receiver_id"], msg["host"],
                                               msg["incarnation"], conn)
        return {"rate": share}, pushes

    def op_deregister_receiver(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        return None, self.registry.deregister(msg["receiver_id"], msg.get("reason", ""))

    def op_heartbeat(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        known, pushes = self.registry.heartbeat(msg["receiver_id"], msg.get("lag"), conn)
        return {"known": known}, pushes

    def op_add_block(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        info = ReceivedBlockInfo.from_wire(msg["block"])
        result = self.tracker.add_block(info)
        # The block goes back only when it differs from what was sent (trimmed, or an earlier add of
        # the same id): most acks stay a few bytes.
        same = result.info is info or result.info == info
        wire = None if same or result.info is None else self.tracker.wire(result.info)
        return {"accepted": result.accepted, "block": wire}, []

    def op_allocate_blocks(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        allocation = self.tracker.allocate_blocks(msg["batch_time_ms"], _max_records(msg.get("max_records")))
        if allocation is None:
            return {"allocated": False, "blocks": {}, "last_allocated_ms": self.tracker.last_allocated_ms}, []
        return {"allocated": True, "blocks": encode_allocation(allocation)}, []

    def op_get_blocks_of_batch(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        allocation = self.tracker.get_blocks_of_batch(msg["batch_time_ms"])
        return {"blocks": self.tracker.wire_allocation(allocation)}, []

    def op_batch_completed(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        info = msg["batch_info"]
        batch_time = info.get("batch_time_ms")
        if not isinstance(batch_time, int) or isinstance(batch_time, bool):
            raise InvalidMessage("batch_completed.batch_info.batch_time_ms must be an integer")
        self.tracker.batch_completed(batch_time, info)
        deletable = self.tracker.cleanup_old_batches(batch_time - self.remember_ms, completed_only=True)
        return {"deletable": [self.tracker.wire(b) for b in deletable]}, []

    def op_publish_rate(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        shares, pushes = self.registry.publish_rate(msg["stream_id"], float(msg["rate"]))
        return {"shares": shares}, pushes

    def op_report_error(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        log.warning("receiver %s of stream %s reports: %s %s", msg["receiver_id"][:256], msg["stream_id"],
                    msg["message"][:2000], msg.get("error", "")[:2000])
        self.registry.report_error(msg["receiver_id"], msg["message"], msg.get("error", ""))
        return None, []

    def op_status(self, msg: dict, conn: Any) -> tuple[Any, list[Push]]:
        return self.status(), []

    def status(self) -> dict[str, Any]:
        counts = self.tracker.unallocated_counts()
        reg = self.registry
        stream_ids = sorted(set(counts) | {r.stream_id for r in reg.receivers.values()} | set(reg.rates))
        streams = {}
        for s in stream_ids:
            blocks, records = counts.get(s, (0, 0))
            streams[s] = {"unallocated_blocks": blocks, "unallocated_records": records,
                          "rate": reg.rates.get(s),
                          "receivers": sorted(r.receiver_id for r in reg.receivers.values() if r.stream_id == s)}
        return {
            "streams": streams,
            "receivers": {rid: r.to_wire() for rid, r in reg.receivers.items()},
            "last_allocated_batch_ms": self.tracker.last_allocated_ms,
            "pending_batches": self.tracker.pending_batches(),
            "rates": dict(reg.rates),
        }

    # --- liveness, recovery --------------------------------------------------------------------

    def check_liveness(self) -> list[Push]:
        return self.registry.check_liveness()

    def apply(self, event: Event) -> None:
        """Replay one WAL event into whichever part owns it."""
        match event:
            case RateUpdated():
                self.registry.apply(event)
            case _:
                self.tracker.apply(event)

    def recover(self, snapshot: dict[str, Any] | None, events: Iterable[Any]) -> None:
        """Load what the log held at start: its snapshot (or None), then its events as stored."""
        if snapshot is not None:
            self.restore(snapshot)
        for event in events:
            self.apply(event_from_wire(event))

    def snapshot(self) -> dict[str, Any]:
        return {"version": 1, "tracker": self.tracker.snapshot(), "registry": self.registry.snapshot()}

    def restore(self, snap: dict[str, Any]) -> None:
        if snap.get("version") != 1:
            raise InvalidMessage(f"snapshot version {snap.get('version')!r} is not supported (expected 1)")
        self.tracker.restore(snap["tracker"])
        self.registry.restore(snap["registry"])


def _max_records(pairs: list | None) -> dict[int, int] | None:
    """``allocate_blocks.max_records`` as {stream_id: records}; InvalidMessage naming a bad entry."""
    if pairs is None:
        return None
    limits: dict[int, int] = {}
    for pair in pairs:
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
                or pair[0] < 0 or pair[1] < 1):
            raise InvalidMessage(f"allocate_blocks.max_records entry {pair!r:.100} is not allowed: "
                                 "expected [stream_id >= 0, records >= 1]")
        limits[pair[0]] = pair[1]
    return limits
