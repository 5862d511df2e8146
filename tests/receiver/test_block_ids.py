"""The id a block is reported under is fixed at its first push and kept for its retries.

A push that wrote its file and then lost the tracker is tried again; if the receiver registered
again in between, a fresh id would write a second file and leave the first where no batch reads it
and no cleanup names it (a fault campaign found one such file past retention).  The tracker takes
the previous registration's ids, so the retry keeps the id; an id it no longer takes has its file
deleted before the block is formed again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.block_info import ReceivedBlockInfo, block_id_prefix
from sluice.clock import ManualClock
from sluice.receiver.block_pusher import BlockPusher
from sluice.receiver.metrics import ReceiverMetrics
from sluice.receiver.rate_limiter import RateLimiter
from sluice.storage.block_store import FileBlockStore
from sluice.tracker.client.connection import ConnectionLost
from sluice.tracker.wire.protocol import E_FORBIDDEN, RemoteError
from sluice.tracker.wire.results import AddBlockResult


class Tracker:
    """A block sink whose answers the test scripts; each registration has a new incarnation."""

    def __init__(self, *answers: BaseException | None) -> None:
        self.registration = 1
        self.answers = list(answers)
        self.reported: list[str] = []

    def incarnation(self, receiver_id: str) -> int:
        return self.registration

    async def add_block(self, info: ReceivedBlockInfo) -> AddBlockResult:
        self.reported.append(info.block_id)
        answer = self.answers.pop(0)
        if answer is not None:
            self.registration += 1  # the receiver registers again before the next attempt
            raise answer
        return AddBlockResult(True, info)


class Receiver:
    async def on_block_acknowledged(self, block_id: str, ranges: object) -> None:
        pass


def pusher(tracker: Tracker, store: FileBlockStore) -> BlockPusher:
    return BlockPusher(
        Receiver(),  # type: ignore[arg-type]
        tracker,
        store,
        RateLimiter(clock=ManualClock()),
        ReceiverMetrics(0, "r"),
        lambda message, error: None,
        stream_id=0,
        receiver_id="r",
        block_interval_ms=200,
        block_lead_ms=0,
        block_queue_size=4,
        max_block_records=100,
        max_block_bytes=None,
        clock=ManualClock(),
    )


async def push_until_acknowledged(p: BlockPusher, attempts: int) -> None:
    for _ in range(attempts - 1):
        with pytest.raises((ConnectionLost, RemoteError)):
            await p.on_push_block("input-0-r-1000", [b"x"], 1)
    await p.on_push_block("input-0-r-1000", [b"x"], 1)


def files(root: Path) -> list[str]:
    return sorted(path.name for path in root.rglob("*") if path.is_file())


async def test_a_retry_after_a_registration_keeps_the_id_and_writes_no_second_file(tmp_path: Path) -> None:
    tracker = Tracker(ConnectionLost("gone"), None)
    await push_until_acknowledged(pusher(tracker, FileBlockStore(tmp_path)), 2)
    assert tracker.reported == [block_id_prefix(0, "r", 1) + "1000"] * 2
    assert len(files(tmp_path)) == 1


async def test_an_id_the_tracker_no_longer_takes_is_formed_again_and_its_file_deleted(tmp_path: Path) -> None:
    tracker = Tracker(RemoteError(E_FORBIDDEN, "not of this registration", "add_block"), None)
    await push_until_acknowledged(pusher(tracker, FileBlockStore(tmp_path)), 2)
    assert tracker.reported == [block_id_prefix(0, "r", 1) + "1000", block_id_prefix(0, "r", 2) + "1000"]
    assert len(files(tmp_path)) == 1 and block_id_prefix(0, "r", 2) in files(tmp_path)[0]
