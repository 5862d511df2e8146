"""The log on an object store, on a directory (no server): numbering, fences, snapshots, recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.clock import ManualClock
from sluice.tracker.log.events import BlockAdded
from sluice.tracker.log.object_log import ObjectLog
from sluice.tracker.log.protocol import (
    POINTER,
    CatchUp,
    Deposed,
    Writer,
    catch_up,
    decode_object,
    log_key,
    log_seqs,
    snapshot_seqs,
)
from sluice.tracker.log.store import DirectoryObjects, ObjectTooLarge, PreconditionFailed
from sluice.tracker.log.wal import WALCorruption, encode_record
from sluice.tracker.server.service import TrackerService
from tests.tracker.conftest import make_block


def store(tmp_path: Path) -> DirectoryObjects:
    return DirectoryObjects(f"file://{tmp_path}/log", tmp_path / "log")


def opened(s: DirectoryObjects, name: str, **kw: object) -> tuple[ObjectLog, TrackerService]:
    log = ObjectLog(s, Writer(name, f"{name}:7100"), clock=ManualClock(), **kw)  # type: ignore[arg-type]
    recovered = log.recover()
    service = TrackerService()
    service.recover(recovered.snapshot, recovered.events)
    return log, service


def add(log: ObjectLog, *ids: str) -> None:
    log.write_bytes(b"".join(encode_record(BlockAdded(make_block(i)).to_wire()) for i in ids))


def queued(service: TrackerService) -> list[str]:
    return [b.block_id for b in service.tracker.get_unallocated_blocks(0)]


def test_each_group_is_the_next_numbered_object_and_a_reopen_fences_first(tmp_path: Path) -> None:
    s = store(tmp_path)
    a, _ = opened(s, "a")
    add(a, "b0", "b1")
    add(a, "b2")
    assert log_seqs(s) == [0, 1, 2]  # the fence of a, then one object per group
    assert decode_object(s.get(log_key(0))[0], "0")[0]["fence"] is True
    b, service = opened(s, "b")
    assert queued(service) == ["b0", "b1", "b2"] and b.position == 3


def test_a_deposed_writer_fails_its_next_write_naming_the_new_leader(tmp_path: Path) -> None:
    s = store(tmp_path)
    a, _ = opened(s, "a")
    add(a, "b0")
    b, _ = opened(s, "b")
    with pytest.raises(Deposed) as err:
        add(a, "lost")
    assert err.value.leader == "b:7100"
    _, service = opened(s, "c")
    assert "lost" not in queued(service)  # what a deposed leader tried to write is not in the log


def test_a_lost_reply_retried_finds_its_own_object(tmp_path: Path) -> None:
    """A put that succeeded but whose reply was lost is retried; the object it finds is its own."""

    class LostReply(DirectoryObjects):
        lose = True

        def put_if_absent(self, key: str, data: bytes) -> None:
            super().put_if_absent(key, data)
            if self.lose and key != log_key(0):
                self.lose = False
                raise ConnectionResetError("reply lost")

    s = LostReply(f"file://{tmp_path}", tmp_path)
    a, _ = opened(s, "a")
    add(a, "b0")
    add(a, "b1")
    assert log_seqs(s) == [0, 1, 2]


def test_a_roll_writes_bounded_parts_points_at_them_and_deletes_what_they_cover(tmp_path: Path) -> None:
    s = store(tmp_path)
    a, service = opened(s, "a", piece_bytes=200)
    service.set_log(a)
    for i in range(40):
        service.tracker.add_block(make_block(f"b{i}"))  # one object per event here
    state = service.snapshot()
    a.roll(state)
    service.tracker.add_block(make_block("after"))
    assert log_seqs(s) == [a.position]  # everything the snapshot covers is gone
    parts = [k for k in s.keys("snapshot/") if "part-" in k]
    assert len(parts) > 5 and all(len(s.get(k)[0]) <= 200 + 16 for k in parts)
    _, again = opened(s, "b")
    assert queued(again) == [*(f"b{i}" for i in range(40)), "after"]


class Unreachable(DirectoryObjects):
    """A store whose next request of each kind named in ``failing`` times out."""

    failing: set[str] = set()

    def _fail(self, kind: str) -> None:
        if kind in self.failing:
            self.failing = self.failing - {kind}
            raise ConnectionError(f"{kind}: connect timeout")

    def put(self, key: str, data: bytes) -> None:
        self._fail("put")
        super().put(key, data)

    def keys(self, prefix: str) -> list[str]:
        self._fail("keys")
        return super().keys(prefix)

    def delete(self, keys: list[str]) -> None:
        self._fail("delete")
        super().delete(keys)


def test_a_roll_caught_in_a_store_outage_is_retried_not_fatal_to_the_log(tmp_path: Path) -> None:
    s = Unreachable(f"file://{tmp_path}/log", tmp_path / "log")
    a, service = opened(s, "a")
    service.set_log(a)
    for i in range(5):
        service.tracker.add_block(make_block(f"b{i}"))
    s.failing = {"put", "keys", "delete"}
    a.roll(service.snapshot())  # each kind of request it makes fails once and is made again
    service.tracker.add_block(make_block("after"))
    assert not s.failing and log_seqs(s) == [a.position]
    _, again = opened(s, "b")
    assert queued(again) == [*(f"b{i}" for i in range(5)), "after"]


def test_a_pointer_that_lags_falls_back_to_the_newest_complete_snapshot(tmp_path: Path) -> None:
    """A deposed leader may write the pointer late: recovery checks it joins the objects left."""
    s = store(tmp_path)
    a, service = opened(s, "a")
    service.set_log(a)
    service.tracker.add_block(make_block("x"))
    a.roll(service.snapshot())
    service.tracker.add_block(make_block("y"))
    s.put(POINTER, encode_record({"seq": 0}))  # names a snapshot long deleted
    _, again = opened(s, "b")
    assert queued(again) == ["x", "y"]


def test_a_gap_no_snapshot_covers_is_corruption(tmp_path: Path) -> None:
    s = store(tmp_path)
    a, _ = opened(s, "a")
    add(a, "b0")
    add(a, "b1")
    s.delete([log_key(1)])
    with pytest.raises(WALCorruption, match="log/00000000000000000001 is missing"):
        catch_up(s, -1)


def test_a_follower_behind_a_deletion_restarts_from_the_snapshot(tmp_path: Path) -> None:
    s = store(tmp_path)
    a, service = opened(s, "a")
    service.set_log(a)
    service.tracker.add_block(make_block("x"))
    follower = catch_up(s, -1)
    service.tracker.add_block(make_block("y"))
    a.roll(service.snapshot())
    service.tracker.add_block(make_block("z"))
    got = catch_up(s, follower.position)
    assert got.snapshot is not None and snapshot_seqs(s) == [got.position - 1]
    assert [e["block"]["block_id"] for e in got.events] == ["z"]


def test_a_standby_behind_a_roll_takes_over_past_the_snapshot_not_at_a_number_it_freed(tmp_path: Path) -> None:
    """The leader acknowledged ``y`` (its object written), then rolled a snapshot over it and deleted
    the object: that number is free again, but a fence there would skip ``y``."""
    s = store(tmp_path)
    a, service = opened(s, "a")
    service.set_log(a)
    service.tracker.add_block(make_block("x"))
    standby = TrackerService()
    seen = catch_up(s, -1)  # the standby has read up to here
    standby.recover(seen.snapshot, seen.events)
    service.tracker.add_block(make_block("y"))
    a.roll(service.snapshot())
    b = ObjectLog(s, Writer("b", "b:7100"), clock=ManualClock())
    recovered = b.recover(CatchUp(position=seen.position))
    if recovered.snapshot is not None:  # as the standby loads it: the snapshot replaces its state
        standby = TrackerService()
    standby.recover(recovered.snapshot, recovered.events)
    assert queued(standby) == ["x", "y"]
    assert b.position == snapshot_seqs(s)[-1] + 1 and log_seqs(s) == [b.position]  # no stray fence left
    with pytest.raises(Deposed):
        add(a, "z")  # a's next write meets b's fence


def test_put_if_absent_and_compare_and_set_on_a_directory(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.put_if_absent("k", b"1")
    with pytest.raises(PreconditionFailed):
        s.put_if_absent("k", b"2")
    etag = s.put_if_match("lease", b"a", None)
    with pytest.raises(PreconditionFailed):
        s.put_if_match("lease", b"b", None)
    s.put_if_match("lease", b"b", etag)
    with pytest.raises(PreconditionFailed):
        s.put_if_match("lease", b"c", etag)
    assert s.get("k") is not None and s.get("k")[0] == b"1"


class Interleaved(DirectoryObjects):
    """A store on which another leader's group lands at the next number just before this tracker's
    fence does: the interleaving of two trackers opening a busy log, made certain."""

    rival: ObjectLog | None = None

    def put_if_absent(self, key: str, data: bytes) -> None:
        rival, self.rival = self.rival, None
        if rival is not None:
            add(rival, "rival")
        super().put_if_absent(key, data)


def test_a_fence_that_collides_with_another_leaders_write_reads_it_and_fences_the_next_number(
    tmp_path: Path,
) -> None:
    s = Interleaved(f"file://{tmp_path}/log", tmp_path / "log")
    a, _ = opened(s, "a")
    add(a, "b0")
    s.rival = a
    b, service = opened(s, "b")  # before: Deposed, and the tracker opening the log exited
    assert queued(service) == ["b0", "rival"] and b.position == 3
    with pytest.raises(Deposed):
        add(a, "lost")


def test_an_object_larger_than_allowed_is_refused_before_it_is_read(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.put("big", b"x" * 2048)
    with pytest.raises(ObjectTooLarge, match="2048 bytes") as err:
        s.get("big", limit=1024)
    assert err.value.etag == s.get("big")[1], "its ETag still serves a compare-and-set"
    assert s.get("big", limit=2048) is not None
