"""A receiver commits a source offset only once the tracker holds its record: a block the tracker
trimmed (some offsets claimed before) commits its kept part; one it dropped (every offset claimed
before, durably) commits its offsets too, so a receiver re-reading after a failed commit moves on;
each is logged and counted.  Real tracker process, real supervisor, pusher and block store."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.receiver.metrics import REGISTRY
from sluice.receiver.receiver import Receiver
from sluice.receiver.supervisor import ReceiverSupervisor
from sluice.storage.block_store import open_block_store
from sluice.tracker.client.tracker_client import TrackerClient
from tests.polling import eventually


class OffsetPieces(Receiver):
    """Stores each ``(start, until)`` piece of topic ``t`` partition 0 as one block; keeps what it
    was told to commit."""

    def __init__(self, pieces: list[tuple[int, int]]) -> None:
        super().__init__()
        self.pieces = pieces
        self.committed: list[list[tuple[int, int]]] = []
        self.done = False

    async def on_start(self) -> None:
        self.spawn(self._run())

    async def _run(self) -> None:
        for start, until in self.pieces:
            await self.store_many([f"rec-{o}" for o in range(start, until)], {("t", 0): (start, until)})
            await self.flush()
        self.done = True

    async def on_block_acknowledged(self, block_id: str, offset_ranges: tuple[OffsetRange, ...]) -> None:
        self.committed.append([(r.from_offset, r.until_offset) for r in offset_ranges])


def refused(reason: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "sluice_receiver_blocks_refused_total", {"stream": "0", "receiver": "r-c", "reason": reason}
        )
        or 0.0
    )


@pytest.mark.slow
async def test_a_dropped_block_commits_what_the_tracker_holds_and_a_trimmed_one_its_kept_part(
    tracker_process, tmp_path: Path
) -> None:
    async with TrackerClient(tracker_process.address, "admin") as admin:  # offsets 0..100 added before
        await admin.register_receiver(0, "earlier", "h")
        claimed = ReceivedBlockInfo(
            0,
            "claim",
            "earlier",
            100,
            f"{(tmp_path / 'blocks').as_uri()}/stream-0/claim.blk",
            (OffsetRange("t", 0, 0, 100),),
        )
        assert (await admin.add_block(claimed)).accepted
        before = refused("duplicate"), refused("trimmed")
        source = OffsetPieces([(50, 100), (50, 150)])
        async with TrackerClient(tracker_process.address, "receiver") as client:
            sup = ReceiverSupervisor(
                source, client, open_block_store((tmp_path / "blocks").as_uri()), stream_id=0, receiver_id="r-c"
            )
            await sup.start()
            await eventually(lambda: source.done, message="both pieces acknowledged")
            await sup.stop("test over")
    # the dropped block's offsets (the tracker holds them), then the kept part of the trimmed one
    assert source.committed == [[(50, 100)], [(100, 150)]]
    assert (refused("duplicate"), refused("trimmed")) == (before[0] + 1, before[1] + 1)
