"""The write-ahead log's event types (Spark's ``ReceivedBlockTrackerLogEvent`` and friends).

Each event is a frozen dataclass; its msgpack form (:meth:`to_wire`) is one map with a ``type``,
which the WAL stores, and :func:`event_from_wire` turns a stored map back into the event, checked.
Recovery replays them in order, dispatching with ``match`` on the class.  They are defined once
here so the state machines that write them and the replay that reads them cannot drift apart, and
the maps are exactly those earlier versions wrote, so an old log still recovers.

- ``BlockAdded {block, seq}``: a block (wire map, already trimmed to its new offsets) joined its
  stream's unallocated queue as the stream's ``seq``-th block (the offset Structured Streaming reads
  by; logs written before sequence numbers existed have none and replay numbers them in order).
  Spark's ``BlockAdditionEvent``.
- ``BatchAllocated {time, blocks: {stream_id: [block_id]}}``: those blocks left the queues for the
  batch.  Ids only: the blocks themselves are in earlier ``BlockAdded`` records or the snapshot,
  which keeps allocating 10,000 blocks cheap.  Spark's ``BatchAllocationEvent``.
- ``BatchCompleted {time, info}``: the driver finished the batch (its ``BatchInfo`` wire map).
- ``BatchCleanup {times}``: those batches are forgotten.  Spark's ``BatchCleanupEvent``.
- ``BlocksCommitted {stream_id, until_seq}``: a Structured Streaming query finished every queued
  block of the stream numbered below ``until_seq``; they left the queue for good.
- ``BlockSkipped {stream_id, block_id, reason}``: an operator skipped a block of a pending batch
  that cannot be read (``sluice-admin skip-block``); a re-run of the batch leaves it out.
- ``RateUpdated {stream_id, rate}``: the last rate the driver published for a stream, so that a
  restarted tracker hands receivers the right share and a restarted driver can read it back.

- ``ReceiverRegistered {receiver_id, stream_id, host, principal, incarnation}``: a receiver
  registered, under the credential (principal) that did it.  Replayed, the registration is live
  again with fresh liveness, so a restarted tracker or a standby that takes over splits each rate
  among the receivers it had, and keeps the id bound to its credential: another credential cannot
  take it in the moment before its receiver registers again.  A receiver that does not come back
  expires after ``tracker.liveness_timeout_ms`` as usual.
- ``ReceiverDeregistered {receiver_id}``: it left (deregistered, or expired by liveness).

Logs written before registrations were logged have neither, and recover as before: their
receivers register again by themselves on reconnecting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sluice.block_info import InvalidMessage, ReceivedBlockInfo
from sluice.errors import SluiceError

__all__ = [
    "BlockAdded",
    "BlocksCommitted",
    "BatchAllocated",
    "BatchCompleted",
    "BatchCleanup",
    "RateUpdated",
    "BlockSkipped",
    "ReceiverRegistered",
    "ReceiverDeregistered",
    "Event",
    "event_from_wire",
    "EventLog",
    "NullLog",
    "LogWriteFailed",
]


@dataclass(frozen=True, slots=True)
class BlockAdded:
    """A block joined its stream's unallocated queue (``BlockAdditionEvent``).

    :param block: the block, already trimmed to its new offsets.
    :param block_wire: ``block``'s wire map when the caller has it already (the tracker caches it),
        so logging does not build it again; derived from ``block`` otherwise.
    :param seq: the block's sequence number in its stream; ``None`` in logs older than the numbers.
    """

    block: ReceivedBlockInfo
    block_wire: dict[str, object] | None = field(default=None, compare=False, repr=False)
    seq: int | None = None

    def to_wire(self) -> dict[str, object]:
        wire = self.block_wire if self.block_wire is not None else self.block.to_wire()
        if self.seq is None:
            return {"type": "BlockAdded", "block": wire}
        return {"type": "BlockAdded", "block": wire, "seq": self.seq}


@dataclass(frozen=True, slots=True)
class BlocksCommitted:
    """A Structured Streaming query is done with a stream's queued blocks numbered below ``until_seq``.

    :param stream_id: the stream.
    :param until_seq: the first sequence number not committed (the query's end offset).
    """

    stream_id: int
    until_seq: int

    def to_wire(self) -> dict[str, object]:
        return {"type": "BlocksCommitted", "stream_id": self.stream_id, "until_seq": self.until_seq}


@dataclass(frozen=True, slots=True)
class BatchAllocated:
    """Blocks left the queues for a batch (``BatchAllocationEvent``).

    :param time_ms: the batch time.
    :param blocks: the allocated block ids per stream (ids only: the blocks are in earlier
        ``BlockAdded`` events or the snapshot, which keeps allocating 10,000 blocks cheap).
    """

    time_ms: int
    blocks: dict[int, list[str]]

    def to_wire(self) -> dict[str, object]:
        return {"type": "BatchAllocated", "time": self.time_ms, "blocks": self.blocks}


@dataclass(frozen=True, slots=True)
class BatchCompleted:
    """The driver finished a batch.

    :param time_ms: the batch time.
    :param info: the batch's ``BatchInfo`` wire map, as the driver sent it.
    """

    time_ms: int
    info: dict[str, object]

    def to_wire(self) -> dict[str, object]:
        return {"type": "BatchCompleted", "time": self.time_ms, "info": self.info}


@dataclass(frozen=True, slots=True)
class BatchCleanup:
    """Batches are forgotten (``BatchCleanupEvent``).

    :param times: their batch times.
    """

    times: list[int]

    def to_wire(self) -> dict[str, object]:
        return {"type": "BatchCleanup", "times": self.times}


@dataclass(frozen=True, slots=True)
class RateUpdated:
    """The last rate the driver published for a stream.

    :param stream_id: the stream.
    :param rate: records per second for the whole stream (the tracker splits it among receivers).
    """

    stream_id: int
    rate: float

    def to_wire(self) -> dict[str, object]:
        return {"type": "RateUpdated", "stream_id": self.stream_id, "rate": self.rate}


@dataclass(frozen=True, slots=True)
class BlockSkipped:
    """An operator skipped a block that cannot be read: the re-run of its batch goes on without it.

    :param stream_id: the block's stream.
    :param block_id: the block.
    :param reason: what the operator gave (shown in status).
    """

    stream_id: int
    block_id: str
    reason: str

    def to_wire(self) -> dict[str, object]:
        return {"type": "BlockSkipped", "stream_id": self.stream_id, "block_id": self.block_id, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ReceiverRegistered:
    """A receiver registered.

    :param receiver_id: the receiver.
    :param stream_id: the stream it feeds.
    :param host: where it runs (shown in status).
    :param principal: the credential that registered it (``token#0``, ``cert:CN=...``; never a secret).
    :param incarnation: the incarnation the registry gave it.
    """

    receiver_id: str
    stream_id: int
    host: str
    principal: str
    incarnation: int

    def to_wire(self) -> dict[str, object]:
        return {
            "type": "ReceiverRegistered",
            "receiver_id": self.receiver_id,
            "stream_id": self.stream_id,
            "host": self.host,
            "principal": self.principal,
            "incarnation": self.incarnation,
        }


@dataclass(frozen=True, slots=True)
class ReceiverDeregistered:
    """A receiver left: it deregistered, or its liveness timed out.

    :param receiver_id: the receiver.
    """

    receiver_id: str

    def to_wire(self) -> dict[str, object]:
        return {"type": "ReceiverDeregistered", "receiver_id": self.receiver_id}


Event = (
    BlockAdded
    | BlocksCommitted
    | BatchAllocated
    | BatchCompleted
    | BatchCleanup
    | RateUpdated
    | BlockSkipped
    | ReceiverRegistered
    | ReceiverDeregistered
)


def _int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidMessage(f"{what} must be an integer, got {type(value).__name__}")
    return value


def event_from_wire(data: object) -> Event:
    """The event a stored map describes; :class:`InvalidMessage` naming what is wrong otherwise."""
    if not isinstance(data, Mapping):
        raise InvalidMessage(f"a tracker event must be a map with a type, got {type(data).__name__}")
    match data:
        case {"type": "BlockAdded", "block": Mapping() as block}:
            seq = data.get("seq")
            return BlockAdded(
                ReceivedBlockInfo.from_wire(block, "BlockAdded.block"),
                dict(block),
                None if seq is None else _int(seq, "BlockAdded.seq"),
            )
        case {"type": "BlocksCommitted", "stream_id": stream_id, "until_seq": until_seq}:
            return BlocksCommitted(
                _int(stream_id, "BlocksCommitted.stream_id"), _int(until_seq, "BlocksCommitted.until_seq")
            )
        case {"type": "BatchAllocated", "time": time_ms, "blocks": Mapping() as blocks}:
            return BatchAllocated(
                _int(time_ms, "BatchAllocated.time"), {int(s): list(ids) for s, ids in blocks.items()}
            )
        case {"type": "BatchCompleted", "time": time_ms, "info": Mapping() as info}:
            return BatchCompleted(_int(time_ms, "BatchCompleted.time"), dict(info))
        case {"type": "BatchCleanup", "times": list() as times}:
            return BatchCleanup([_int(t, "BatchCleanup.times[]") for t in times])
        case {"type": "RateUpdated", "stream_id": stream_id, "rate": int() | float() as rate}:
            return RateUpdated(_int(stream_id, "RateUpdated.stream_id"), float(rate))
        case {"type": "BlockSkipped", "stream_id": stream_id, "block_id": str() as block_id, "reason": str() as why}:
            return BlockSkipped(_int(stream_id, "BlockSkipped.stream_id"), block_id, why)
        case {
            "type": "ReceiverRegistered",
            "receiver_id": str() as receiver_id,
            "stream_id": stream_id,
            "host": str() as host,
            "principal": str() as principal,
            "incarnation": incarnation,
        }:
            return ReceiverRegistered(
                receiver_id,
                _int(stream_id, "ReceiverRegistered.stream_id"),
                host,
                principal,
                _int(incarnation, "ReceiverRegistered.incarnation"),
            )
        case {"type": "ReceiverDeregistered", "receiver_id": str() as receiver_id}:
            return ReceiverDeregistered(receiver_id)
        case {"type": kind}:
            raise InvalidMessage(
                f"not a tracker event, or a {kind!r} event with missing or mistyped fields: {sorted(data)}"
            )
        case _:
            raise InvalidMessage(f"a tracker event must be a map with a type, got {type(data).__name__}")


class EventLog(Protocol):
    """Where state machines write events before they change state.

    ``write`` raises (any exception) when the event could not be logged; the caller then leaves its
    state unchanged, as Spark's ``writeToLog`` returning false does.
    """

    def write(self, event: Event) -> None: ...


class NullLog:
    """No write-ahead log (Spark without a checkpoint directory): every write succeeds."""

    def write(self, event: Event) -> None:
        return None


class LogWriteFailed(SluiceError, RuntimeError):
    """The event could not be logged; nothing changed and the caller may try again."""

    retriable = True
