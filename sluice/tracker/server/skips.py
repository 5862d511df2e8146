"""Blocks an operator skipped: a block of a pending batch that cannot be read (its file is gone,
or damaged) would fail the batch on every driver start under ``on_batch_failure = "stop"``.

``sluice-admin skip-block`` sends ``skip_block``; the tracker logs a ``BlockSkipped`` event first,
so the skip survives restarts, and from then on ``get_blocks_of_batch`` (what a restarted driver
re-runs a batch from) leaves the block out.  Skips stay listed in ``status`` and counted in
``sluice_tracker_blocks_skipped`` until the batch holding the block is cleaned up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sluice.block_info import InvalidMessage, ReceivedBlockInfo
from sluice.tracker.log.events import BlockSkipped, EventLog
from sluice.tracker.wire.messages import SkippedBlock


class Skips:
    """The skipped blocks, by (stream, block id), with the reason given."""

    def __init__(self) -> None:
        self.reasons: dict[tuple[int, str], str] = {}

    def skip(
        self, log_: EventLog, event: BlockSkipped, pending: Iterable[Mapping[int, list[ReceivedBlockInfo]]]
    ) -> None:
        """Log and apply a skip of a block some pending batch holds; InvalidMessage otherwise."""
        if not any(b.block_id == event.block_id for batch in pending for b in batch.get(event.stream_id, ())):
            raise InvalidMessage(
                f"skip_block: block {event.block_id!r:.300} of stream {event.stream_id} is in no pending batch "
                "(only a block of a batch allocated and not completed can be skipped)"
            )
        log_.write(event)
        self.apply(event)

    def apply(self, event: BlockSkipped) -> None:
        self.reasons[(event.stream_id, event.block_id)] = event.reason

    def without(self, allocation: Mapping[int, list[ReceivedBlockInfo]]) -> dict[int, list[ReceivedBlockInfo]]:
        """``allocation`` with the skipped blocks left out."""
        if not self.reasons:
            return dict(allocation)
        return {s: [b for b in blocks if (s, b.block_id) not in self.reasons] for s, blocks in allocation.items()}

    def forget(self, blocks: Iterable[ReceivedBlockInfo]) -> None:
        """The batch holding these blocks is cleaned up: their skips are history."""
        for b in blocks:
            self.reasons.pop((b.stream_id, b.block_id), None)

    def to_wire(self) -> list[SkippedBlock]:
        return [{"stream_id": s, "block_id": b, "reason": r} for (s, b), r in sorted(self.reasons.items())]

    def restore(self, wire: Iterable[SkippedBlock]) -> None:
        self.reasons = {(int(w["stream_id"]), str(w["block_id"])): str(w["reason"]) for w in wire}
