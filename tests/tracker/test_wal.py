"""The write-ahead log: torn tails, corruption in the middle, rolling, snapshots."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sluice.clock import ManualClock
from sluice.tracker.log.events import BlockAdded
from sluice.tracker.log.wal import RECORD, WALCorruption, WriteAheadLog, encode_record, read_records
from sluice.tracker.server.service import TrackerService
from tests.tracker.conftest import make_block


def write_events(directory: Path, n: int) -> Path:
    wal = WriteAheadLog(directory, fsync=False)
    wal.recover()
    for i in range(n):
        wal.write(BlockAdded(make_block(f"b{i}")))
    segment = wal.segment
    wal.close()
    return segment


def block_ids(events: list[dict]) -> list[str]:
    return [e["block"]["block_id"] for e in events]


def test_events_come_back_in_order(tmp_path: Path) -> None:
    write_events(tmp_path, 5)
    recovered = WriteAheadLog(tmp_path).recover()
    assert block_ids(recovered.events) == [f"b{i}" for i in range(5)] and recovered.truncated == []


@pytest.mark.parametrize("cut", [1, 3, RECORD.size + 2])
def test_torn_tail_is_truncated_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture, cut) -> None:
    segment = write_events(tmp_path, 4)
    data = segment.read_bytes()
    last = len(encode_record(BlockAdded(make_block("b3")).to_wire()))
    torn = data[: len(data) - last + cut]  # the process died after writing `cut` bytes of the last record
    segment.write_bytes(torn)
    with caplog.at_level(logging.WARNING, logger="sluice.tracker.log.wal"):
        recovered = WriteAheadLog(tmp_path, fsync=False).recover()
    assert block_ids(recovered.events) == ["b0", "b1", "b2"]
    assert len(recovered.truncated) == 1 and str(segment) in recovered.truncated[0]
    assert "torn tail" in caplog.text
    assert segment.stat().st_size == len(data) - last  # cut back to the last whole record
    # The next start sees a clean log (plus the empty segment the previous start opened).
    again = WriteAheadLog(tmp_path, fsync=False).recover()
    assert block_ids(again.events) == ["b0", "b1", "b2"] and again.truncated == []


def test_full_length_last_record_with_a_bad_crc_stops_naming_file_and_offset(tmp_path: Path) -> None:
    """Bit rot in a whole record may hit an acknowledged one: recovery stops, it never truncates."""
    segment = write_events(tmp_path, 4)
    data = segment.read_bytes()
    last = len(encode_record(BlockAdded(make_block("b3")).to_wire()))
    segment.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(WALCorruption, match=f"{segment} at offset {len(data) - last}: a CRC mismatch"):
        WriteAheadLog(tmp_path, fsync=False).recover()
    assert segment.stat().st_size == len(data)  # nothing was cut


def test_zero_filled_tail_is_a_torn_tail(tmp_path: Path) -> None:
    segment = write_events(tmp_path, 2)
    segment.write_bytes(segment.read_bytes() + bytes(4096))
    assert block_ids(WriteAheadLog(tmp_path, fsync=False).recover().events) == ["b0", "b1"]


def test_bad_crc_in_the_middle_stops_with_file_and_offset(tmp_path: Path) -> None:
    segment = write_events(tmp_path, 4)
    data = bytearray(segment.read_bytes())
    record = len(encode_record(BlockAdded(make_block("b0")).to_wire()))
    data[record + RECORD.size + 5] ^= 0xFF  # a payload byte of the second record
    segment.write_bytes(bytes(data))
    with pytest.raises(WALCorruption) as err:
        WriteAheadLog(tmp_path, fsync=False).recover()
    assert str(segment) in str(err.value) and f"offset {record}" in str(err.value)
    assert segment.read_bytes() == bytes(data)  # nothing was cut


def test_damaged_length_in_the_middle_is_corruption_not_a_tail(tmp_path: Path) -> None:
    segment = write_events(tmp_path, 4)
    data = bytearray(segment.read_bytes())
    record = len(encode_record(BlockAdded(make_block("b0")).to_wire()))
    data[record : record + 4] = (10**9).to_bytes(4, "big")  # a length past the end of the file
    segment.write_bytes(bytes(data))
    with pytest.raises(WALCorruption, match=f"offset {record}"):
        WriteAheadLog(tmp_path, fsync=False).recover()


@pytest.mark.parametrize("bit", [12, 20, 29, 31])  # above a small record's length: each lengthens it
def test_a_flipped_bit_in_the_last_records_length_is_corruption_not_a_tail(tmp_path: Path, bit: int) -> None:
    """The last record written whole with a damaged length looks cut short; its payload checking
    against its CRC tells it from a torn write, so the acknowledged record is not dropped."""
    segment = write_events(tmp_path, 4)
    data = bytearray(segment.read_bytes())
    last = len(data) - len(encode_record(BlockAdded(make_block("b3")).to_wire()))
    length = int.from_bytes(data[last : last + 4], "big")
    assert length < 1 << 12
    data[last : last + 4] = (length | 1 << bit).to_bytes(4, "big")
    segment.write_bytes(bytes(data))
    with pytest.raises(WALCorruption, match=f"offset {last}: .* the length field is damaged"):
        WriteAheadLog(tmp_path, fsync=False).recover()
    assert segment.read_bytes() == bytes(data)  # nothing was cut


def test_damage_in_an_older_segment_is_corruption(tmp_path: Path) -> None:
    old = write_events(tmp_path, 3)
    write_events(tmp_path, 2)  # a second start: a newer segment
    old.write_bytes(old.read_bytes()[:-3])  # torn, but not the newest segment
    with pytest.raises(WALCorruption, match=old.name):
        WriteAheadLog(tmp_path, fsync=False).recover()


def service_with_wal(
    directory: Path, clock: ManualClock, segment_bytes: int = 1 << 20
) -> tuple[TrackerService, WriteAheadLog]:
    wal = WriteAheadLog(directory, fsync=False, segment_bytes=segment_bytes, segment_ms=60_000, clock=clock)
    recovered = wal.recover()
    service = TrackerService()
    service.recover(recovered.snapshot, recovered.events)
    service.set_log(wal)
    return service, wal


def roll_if_due(service: TrackerService, wal: WriteAheadLog) -> bool:
    if wal.should_roll():
        wal.roll(service.snapshot())
        return True
    return False


def test_rolls_by_size_snapshot_then_deletes_older_segments(tmp_path: Path) -> None:
    clock = ManualClock()
    service, wal = service_with_wal(tmp_path, clock, segment_bytes=2000)
    rolls = 0
    for t in range(1, 30):
        service.tracker.add_block(make_block(f"b{t}", ranges=(("t", 0, t * 10, t * 10 + 10),)))
        if t % 3 == 0:
            service.tracker.allocate_blocks(t * 1000)
        if t % 6 == 0:
            service.tracker.batch_completed(t * 1000, {"batch_time_ms": t * 1000})
            service.tracker.cleanup_old_batches(t * 1000 - 6000, completed_only=True)
        service.registry.publish_rate(0, float(t))
        rolls += roll_if_due(service, wal)
    assert rolls >= 3
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len([n for n in names if n.startswith("snapshot-")]) == 1
    assert len([n for n in names if n.startswith("log-")]) == 1  # older segments deleted
    before = service.status()
    batches = {t: service.tracker.get_blocks_of_batch(t) for t in service.tracker.batch_times()}
    wal.close()

    recovered, _ = service_with_wal(tmp_path, clock)
    assert recovered.status() == before
    assert {t: recovered.tracker.get_blocks_of_batch(t) for t in recovered.tracker.batch_times()} == batches
    # exactly-once marks came back through the snapshot
    assert recovered.tracker.add_block(make_block("again", ranges=(("t", 0, 10, 20),))).accepted is False


def test_rolls_by_age(tmp_path: Path) -> None:
    clock = ManualClock(100_000)
    service, wal = service_with_wal(tmp_path, clock)
    service.tracker.add_block(make_block("a"))
    assert not wal.should_roll()
    clock.advance(61_000)  # tracker.wal_segment_ms is 60 s
    assert wal.should_roll()
    wal.roll(service.snapshot())
    assert not wal.should_roll()  # a fresh, empty segment does not roll however old
    clock.advance(120_000)
    assert not wal.should_roll()
    wal.close()
    recovered, _ = service_with_wal(tmp_path, clock)
    assert [b.block_id for b in recovered.tracker.get_unallocated_blocks(0)] == ["a"]


def test_bad_snapshot_is_corruption(tmp_path: Path) -> None:
    clock = ManualClock()
    service, wal = service_with_wal(tmp_path, clock)
    service.tracker.add_block(make_block("a"))
    wal.roll(service.snapshot())
    wal.close()
    snapshot = next(tmp_path.glob("snapshot-*"))
    snapshot.write_bytes(snapshot.read_bytes()[:-2] + b"xx")
    with pytest.raises(WALCorruption, match=snapshot.name):
        WriteAheadLog(tmp_path, fsync=False).recover()


def test_a_state_over_the_piece_limit_restarts_from_its_pieces(tmp_path: Path) -> None:
    """A snapshot is records of at most ``piece_bytes`` each, so no state is too large to restart
    from (the limit is lowered here so that a small state spans many pieces)."""
    clock = ManualClock()
    wal = WriteAheadLog(tmp_path, fsync=False, piece_bytes=256, clock=clock)
    wal.recover()
    service = TrackerService()
    service.set_log(wal)
    for i in range(200):
        service.tracker.add_block(make_block(f"b{i}", ranges=(("t", 0, i * 10, i * 10 + 10),)))
    state = service.snapshot()
    wal.roll(state)
    wal.close()
    snapshot = next(tmp_path.glob("snapshot-*"))
    records, _ = read_records(snapshot, last=False)
    assert records[0]["snapshot_pieces"] == len(records) - 1 > 20
    assert max(len(encode_record(r)) for r in records[1:]) <= 256 + RECORD.size + 5
    recovered, _ = service_with_wal(tmp_path, clock)
    assert recovered.snapshot() == state


def test_a_one_record_snapshot_still_restores(tmp_path: Path) -> None:
    """Snapshots written before pieces are one record holding the state."""
    clock = ManualClock()
    service = TrackerService()
    service.tracker.add_block(make_block("a"))
    (tmp_path / "snapshot-0000000000").write_bytes(encode_record(service.snapshot()))
    recovered, _ = service_with_wal(tmp_path, clock)
    assert [b.block_id for b in recovered.tracker.get_unallocated_blocks(0)] == ["a"]
