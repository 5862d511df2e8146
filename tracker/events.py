"""The write-ahead log's event types (Spark's ``ReceivedBlockTrackerLogEvent`` and friends).

Each event is one msgpack map with a ``type``; the WAL stores them, recovery replays them in order.
They are defined once here so the state machines that write them and the replay that reads them
cannot drift apart.

- ``BlockAdded {block}``: a block (wire map, already trimmed to its new offsets) joined its
  stream's unallocated queue.  Spark's ``BlockAdditionEvent``.
- ``BatchAllocated {time, blocks: {stream_id: [block_id]}}``: those blocks left the queues for the
  batch.  Ids only: the blocks themselves are in earlier ``BlockAdded`` records or the snapshot,
  which keeps allocating 10,000 blocks cheap.  Spark's ``BatchAllocationEvent``.
- ``BatchCompleted {time, info}``: the driver finished the batch (its ``BatchInfo`` wire map).
- ``BatchCleanup {times}``: those batches are forgotten.  Spark's ``BatchCleanupEvent``.
- ``RateUpdated {stream_id, rate}``: the last rate the driver published for a stream, so that a
  restarted tracker hands receivers the right share and a restarted driver can read it back.

Receiver registrations are not logged: a receiver's :class:`~tracker.client.TrackerClient`
registers it again by itself on reconnecting, so a restarted tracker knows its receivers again
within one reconnect, with fresh liveness, and the log never holds a dead receiver's entry.
"""

from __future__ import annotations

from typing import Any, Protocol

BLOCK_ADDED = "BlockAdded"
BATCH_ALLOCATED = "BatchAllocated"
BATCH_COMPLETED = "BatchCompleted"
BATCH_CLEANUP = "BatchCleanup"
RATE_UPDATED = "RateUpdated"
TYPES = (BLOCK_ADDED, BATCH_ALLOCATED, BATCH_COMPLETED, BATCH_CLEANUP, RATE_UPDATED)


class EventLog(Protocol):
    """Where state machines write events before they change state.

    ``write`` raises (any exception) when the event could not be logged; the caller then leaves its
    state unchanged, as Spark's ``writeToLog`` returning false does.
    """

    def write(self, event: dict[str, Any]) -> None: ...


class NullLog:
    """No write-ahead log (Spark without a checkpoint directory): every write succeeds."""

    def write(self, event: dict[str, Any]) -> None:
        return None


class LogWriteFailed(RuntimeError):
    """The event could not be logged; nothing changed and the caller may try again."""


def block_added(block_wire: dict) -> dict:
    return {"type": BLOCK_ADDED, "block": block_wire}


def batch_allocated(time_ms: int, blocks: dict[int, list[str]]) -> dict:
    return {"type": BATCH_ALLOCATED, "time": time_ms, "blocks": blocks}


def batch_completed(time_ms: int, info: dict) -> dict:
    return {"type": BATCH_COMPLETED, "time": time_ms, "info": info}


def batch_cleanup(times: list[int]) -> dict:
    return {"type": BATCH_CLEANUP, "times": times}


def rate_updated(stream_id: int, rate: float) -> dict:
    return {"type": RATE_UPDATED, "stream_id": stream_id, "rate": rate}
