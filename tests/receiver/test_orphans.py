"""A receiver deletes the block files an earlier run of it stored and never reported.

A thirty-minute fault campaign left one block file in the store past retention: its receiver was
killed after writing the block and before the tracker acknowledged it, and no batch or cleanup ever
named the file.  The rule is pure (:func:`sluice.receiver.orphans.orphans`); against a real tracker,
a restarted receiver deletes such a file once it is ``orphan_grace_ms`` old and keeps every file the
tracker holds, every file of its own registration and every file young enough to be retried.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from sluice.block_info import block_id_prefix
from sluice.receiver.orphans import delete_orphans, orphans
from sluice.receiver.sources.generator import GeneratorReceiver, make_record
from sluice.storage.block_store import Block, FileBlockStore, StoredBlock, open_block_store
from sluice.tracker.client.tracker_client import TrackerClient
from sluice.tracker.wire.protocol import E_UNKNOWN_OP, RemoteError
from tests.polling import eventually

from .helpers import allocate_all, records_of
from .test_supervisor import supervisor

NOW, GRACE = 1_800_000_000.0, 600.0


def stored(block_id: str, age_s: float = 3_600.0) -> StoredBlock:
    return StoredBlock(block_id, f"file:///blocks/stream-0/{block_id}.blk", NOW - age_s)


def test_the_rule_takes_only_the_receivers_own_old_files_of_earlier_registrations() -> None:
    files = [
        stored("input-0-r-100-5000"),  # an earlier registration's block, an hour old: an orphan
        stored("input-0-r-100-5200-f3"),  # one a flush cut early: too
        stored("input-0-r-100-5400", age_s=GRACE - 1),  # young enough to be retried by a live process
        stored("input-0-r-200-5600"),  # of this process's first registration
        stored("input-0-r-300-5800"),  # of a later one of this process
        stored("input-0-r-0-150-6000"),  # receiver r-0, whose id extends r's
        stored("input-0-r-6200"),  # an id of a version without incarnations
        stored("input-1-r-100-6400"),  # another stream's
    ]
    found = orphans(files, 0, "r", first_incarnation=200, now_s=NOW, grace_s=GRACE)
    assert [b.block_id for b in found] == ["input-0-r-100-5000", "input-0-r-100-5200-f3"]
    assert orphans(files, 0, "r-0", 200, NOW, GRACE) == [files[5]]


def test_a_file_store_lists_a_streams_blocks_by_prefix_with_their_write_times(tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path)
    assert store.stored_blocks(0, "input-0-r-") == []  # no directory yet
    for block_id in ("input-0-r-1-10", "input-0-r-1-20", "input-0-q-1-10"):
        store.write(Block(0, block_id, [b"x"]))
    os.utime(tmp_path / "stream-0" / "input-0-r-1-10.blk", (1_000.0, 1_000.0))
    (tmp_path / "stream-0" / "input-0-r-1-30.blk.tmp").write_bytes(b"half")  # a write cut short
    listed = sorted(store.stored_blocks(0, "input-0-r-"), key=lambda b: b.block_id)
    assert [(b.block_id, b.location) for b in listed] == [
        ("input-0-r-1-10", store.location_of(0, "input-0-r-1-10")),
        ("input-0-r-1-20", store.location_of(0, "input-0-r-1-20")),
    ]
    assert listed[0].modified == 1_000.0 and listed[1].modified > time.time() - 60


class Tracker:
    """A tracker that holds ``known``, or (``unknown_op``) one of before ``known_blocks``."""

    def __init__(self, known: set[str], unknown_op: bool = False) -> None:
        self.known, self.unknown_op = known, unknown_op
        self.asked: list[list[str]] = []

    async def known_blocks(self, stream_id: int, receiver_id: str, block_ids: list[str]) -> set[str]:
        self.asked.append(block_ids)
        if self.unknown_op:
            raise RemoteError(E_UNKNOWN_OP, "unknown op known_blocks", "known_blocks")
        return self.known & set(block_ids)


async def test_only_what_the_tracker_does_not_hold_is_deleted_and_an_old_tracker_deletes_nothing(
    tmp_path: Path,
) -> None:
    store = FileBlockStore(tmp_path)
    for block_id in ("input-0-r-100-1", "input-0-r-100-2", "input-0-r-200-3"):
        store.write(Block(0, block_id, [b"x"]))
        os.utime(tmp_path / "stream-0" / f"{block_id}.blk", (1_000.0, 1_000.0))

    def left() -> list[str]:
        return sorted(b.block_id for b in store.stored_blocks(0, block_id_prefix(0, "r")))

    assert await delete_orphans(store, Tracker(set(), unknown_op=True), 0, "r", 200, GRACE) is None
    assert await delete_orphans(store, object(), 0, "r", 200, GRACE) is None
    assert left() == ["input-0-r-100-1", "input-0-r-100-2", "input-0-r-200-3"]
    tracker = Tracker({"input-0-r-100-2"})
    assert await delete_orphans(store, tracker, 0, "r", 200, GRACE) == 1
    assert [sorted(ids) for ids in tracker.asked] == [["input-0-r-100-1", "input-0-r-100-2"]]
    assert left() == ["input-0-r-100-2", "input-0-r-200-3"]


@pytest.mark.slow
async def test_a_restarted_receiver_deletes_what_its_killed_run_stored_and_never_reported(
    tracker_process, tmp_path: Path
) -> None:
    """The first run stores and reports 1,000 records, then dies with two blocks written and not
    reported (one an hour old, one just written); the second run deletes the old one only."""
    store = open_block_store((tmp_path / "blocks").as_uri())
    async with TrackerClient(tracker_process.address, "receiver") as first_client:
        first = supervisor(GeneratorReceiver(total=1_000, batch_size=100), first_client, tmp_path)
        await first.start()
        await eventually(lambda: first.pusher.records_stored == 1_000 and first.pusher.unacknowledged_blocks() == 0)
        incarnation = first_client.incarnation("r-0")
        assert incarnation is not None
        await first.abandon()  # killed: no deregistration, its connection simply goes
    recorded = {Path(p).name for p in os.listdir(tmp_path / "blocks" / "stream-0")}
    prefix = block_id_prefix(0, "r-0", incarnation)
    old, young = f"{prefix}1000", f"{prefix}2000"
    for block_id in (old, young):  # written, then the process died before add_block
        store.write(Block(0, block_id, [make_record("r-0", 0, 3)]))
    hour_ago = time.time() - 3_600
    for name in [*recorded, f"{old}.blk"]:  # only the tracker's answer keeps the recorded ones
        os.utime(tmp_path / "blocks" / "stream-0" / name, (hour_ago, hour_ago))

    async with TrackerClient(tracker_process.address, "receiver") as second_client:
        receiver = GeneratorReceiver(total=500, batch_size=100, tag="r-0b")
        second = supervisor(receiver, second_client, tmp_path, orphan_grace_ms=600_000)
        await second.start()
        stream = tmp_path / "blocks" / "stream-0"
        await eventually(lambda: not (stream / f"{old}.blk").exists(), message="the old orphan deleted")
        await eventually(lambda: second.pusher.records_stored == 500 and second.pusher.unacknowledged_blocks() == 0)
        await second.stop("test over")
    left = {p.name for p in stream.iterdir()}
    assert recorded <= left and f"{young}.blk" in left and f"{old}.blk" not in left
    blocks = await allocate_all(tracker_process.address)
    assert {Path(urlsplit(b.location).path).name for b in blocks} == left - {f"{young}.blk"}
    values = records_of(blocks)  # every recorded block still reads
    assert values[:1_000] == [make_record("r-0", i, 3) for i in range(1_000)]
    assert len(values) == 1_500
