"""The tracker's write-ahead log: CRC-checked records in rolling segment files, plus snapshots.

Layout of ``wal_dir``: ``log-<seq>`` segments (``seq`` is a zero-padded counter) and
``snapshot-<seq>``, the live state after every record of segments ``<= seq``: a header record
naming its pieces, then the state's msgpack cut into records of at most ``wal_piece_bytes`` each,
so a state of any size restarts (one-record snapshots, the older form, still read).  A record is
``length (4 bytes BE) | crc32 of payload (4 bytes BE) | payload`` where the payload is one msgpack
event (:mod:`sluice.tracker.log.events`).

Why this shape:
- a CRC per record lets recovery tell a torn tail (the process died mid-write: the last record is
  short or does not check, and nothing follows it) from corruption in the middle (a bad record with
  more data after it, or in an older segment), which must stop the tracker rather than silently
  lose acknowledged blocks;
- segments let old history be deleted as whole files: when a segment rolls (by size or age) a
  snapshot of live state is written, after which every older segment and snapshot is redundant;
- each process start opens a fresh segment, so a truncated tail is never appended to.

:meth:`WriteAheadLog.write` is synchronous (write + fsync per event, Spark's behaviour, used by the
pure state machine in tests); the service batches through :class:`sluice.tracker.log.group_commit.GroupCommit`.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from sluice.clock import Clock, SystemClock
from sluice.durable import atomic_write, fsync_dir
from sluice.errors import SluiceError
from sluice.settings import TrackerSettings
from sluice.tracker.log.events import Event
from sluice.tracker.log.metrics import WAL_FSYNC_SECONDS
from sluice.tracker.wire.protocol import pack

log = logging.getLogger(__name__)

_DEFAULTS = TrackerSettings()  # the schema's tracker.* defaults

RECORD = struct.Struct(">II")
MAX_RECORD = 1 << 30
_SEGMENT = re.compile(r"^log-(\d{10})$")
_SNAPSHOT = re.compile(r"^snapshot-(\d{10})$")


class LogClosed(SluiceError, OSError):
    """A write after the log was closed; an ``OSError`` like every other failed write, so the group
    commit fails the waiting requests the same way."""


class WALCorruption(SluiceError, RuntimeError):
    """A damaged record that is not a torn tail: the message names the file and the offset."""


class RecordTooLarge(SluiceError, ValueError):
    """A record over :data:`MAX_RECORD`: recovery would refuse it, so it is never written."""


def encode_record(event: object) -> bytes:
    payload = pack(event)
    if len(payload) > MAX_RECORD:
        raise RecordTooLarge(f"a log record of {len(payload)} bytes is over the {MAX_RECORD} bytes a record may hold")
    return RECORD.pack(len(payload), zlib.crc32(payload)) + payload


def snapshot_records(state: object, piece_bytes: int) -> list[bytes]:
    """``state`` as records of at most ``piece_bytes`` of its msgpack each, after a header naming
    how many pieces and bytes follow: a snapshot of any size, every record bounded."""
    data = pack(state)
    pieces = [data[i : i + piece_bytes] for i in range(0, len(data), piece_bytes)]
    return [encode_record({"snapshot_pieces": len(pieces), "bytes": len(data)}), *map(encode_record, pieces)]


def snapshot_from_records(records: list[object], name: str) -> object:
    """The state :func:`snapshot_records` wrote (or a one-record snapshot, the form before pieces)."""
    header = records[0] if records else None
    if len(records) == 1 and not (isinstance(header, dict) and "snapshot_pieces" in header):
        return header
    if not isinstance(header, dict) or not isinstance(header.get("snapshot_pieces"), int):
        raise WALCorruption(f"{name} at offset 0: a snapshot opens with a header naming its pieces")
    pieces = [p for p in records[1:] if isinstance(p, bytes)]
    if len(pieces) != header["snapshot_pieces"] or len(pieces) != len(records) - 1:
        raise WALCorruption(f"{name}: the header names {header['snapshot_pieces']} pieces, found {len(records) - 1}")
    data = b"".join(pieces)
    if len(data) != header.get("bytes"):
        raise WALCorruption(f"{name}: the pieces hold {len(data)} bytes, the header says {header.get('bytes')}")
    return _unpack(data)


def _unpack(payload: bytes) -> object:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


@dataclass
class Recovered:
    """What the log held at start: the latest snapshot (or None) and the events after it."""

    snapshot: object  # as msgpack decoded it; the service checks it
    events: list[Any] = field(default_factory=list)  # msgpack values: event_from_wire checks each
    truncated: list[str] = field(default_factory=list)  # "file at offset" of each torn tail cut


def read_records(path: Path, *, last: bool) -> tuple[list[Any], int | None]:
    """The events of one segment, and the offset of a torn tail to cut (only when ``last``)."""
    return parse_records(path.read_bytes(), str(path), last=last)


def parse_records(data: bytes, name: str, *, last: bool) -> tuple[list[Any], int | None]:
    """The events in ``data`` (named ``name`` in errors), and the offset of a torn tail to cut
    (only when ``last``: the newest segment's end, the one place a crash can leave a short write).

    Each record is ``Any``: whatever msgpack value was written, checked by whoever reads it
    (:func:`~sluice.tracker.log.events.event_from_wire`, a snapshot's or a header's reader)."""
    events: list[Any] = []
    pos, n = 0, len(data)
    while pos < n:
        problem = None
        if n - pos < RECORD.size:
            problem = "a partial record header"
        else:
            length, crc = RECORD.unpack_from(data, pos)
            end = pos + RECORD.size + length
            if length == 0 or length > MAX_RECORD:
                problem = f"an impossible record length {length}"
            elif end > n:
                problem = f"a record of {length} bytes with only {n - pos - RECORD.size} present"
            else:
                payload = data[pos + RECORD.size : end]
                if zlib.crc32(payload) != crc:
                    problem = "a CRC mismatch"
                else:
                    try:
                        events.append(_unpack(payload))
                    except Exception as exc:  # noqa: BLE001 - whatever the decoder raises, the record is corrupt
                        raise WALCorruption(
                            f"{name} at offset {pos}: CRC matches but the event does not decode: {exc}"
                        ) from None
                    pos = end
                    continue
        # Only a write cut short is a torn tail: a header or record running past the end of the
        # newest segment (or zeros a crash left there), with no intact record after it.  A
        # full-length record whose CRC fails is bit rot in something that may have been
        # acknowledged: truncating it could drop an acknowledged record, so recovery stops.
        if last and _cut_short(data, pos) and not _intact_record_after(data, pos + 1):
            if _whole_payload_after(data, pos):
                raise WALCorruption(
                    f"{name} at offset {pos}: {problem}, yet the bytes after its header check against its CRC: "
                    "the length field is damaged (not a torn tail), refusing to start"
                )
            log.warning("WAL %s: torn tail at offset %d (%s); truncating %d bytes", name, pos, problem, n - pos)
            return events, pos
        raise WALCorruption(
            f"{name} at offset {pos}: {problem}; the log is damaged before its end (not a torn tail), refusing to start"
        )
    return events, None


def _cut_short(data: bytes, pos: int) -> bool:
    """Whether the record at ``pos`` is a write cut short: its header or its length runs past the
    end of the data, or everything from ``pos`` on is zeros (space a crash left unwritten)."""
    n = len(data)
    if n - pos < RECORD.size or not any(data[pos:]):
        return True
    length, _ = RECORD.unpack_from(data, pos)
    return pos + RECORD.size + length > n


def _whole_payload_after(data: bytes, pos: int) -> bool:
    """Whether everything after the header at ``pos`` is the record's whole payload (its CRC checks):
    then the record was written in full and its length field, claiming more, is what is damaged.  A
    write cut short leaves part of a payload, which checks only by a 2**-32 chance."""
    start = pos + RECORD.size
    if len(data) <= start:
        return False
    _, crc = RECORD.unpack_from(data, pos)
    return zlib.crc32(data[start:]) == crc


def _intact_record_after(data: bytes, start: int) -> bool:
    """Whether any position from ``start`` holds a record whose CRC checks (slow; damage only)."""
    n = len(data)
    for p in range(start, n - RECORD.size):
        length, crc = RECORD.unpack_from(data, p)
        end = p + RECORD.size + length
        if 0 < length <= n and end <= n and zlib.crc32(data[p + RECORD.size : end]) == crc:
            return True
    return False


class WriteAheadLog:
    """Segment files in one directory; call :meth:`recover` first, then write.

    :param directory: where the segments and snapshots live (created if missing).
    :param segment_bytes: roll to a new segment (after a snapshot) past this size.
    :param segment_ms: ... or past this age.
    :param piece_bytes: a snapshot is written as records of at most this much state each.
    :param fsync: sync every write (``False`` only for tests and benchmarks of the non-durable peer).
    :param clock: for the segment age (a ``ManualClock`` in tests).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = _DEFAULTS.wal_segment_bytes,
        segment_ms: int = _DEFAULTS.wal_segment_ms,
        piece_bytes: int = _DEFAULTS.wal_piece_bytes,
        fsync: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.piece_bytes = piece_bytes
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.fsync = fsync
        self.clock: Clock = clock or SystemClock()
        self._fd: int | None = None
        self._seq = 0
        self._size = 0
        self._opened_at = 0.0
        self.closed = False

    # --- start -------------------------------------------------------------------------------

    def _listing(self) -> tuple[dict[int, Path], dict[int, Path]]:
        segments: dict[int, Path] = {}
        snapshots: dict[int, Path] = {}
        for p in self.dir.iterdir():
            if m := _SEGMENT.match(p.name):
                segments[int(m.group(1))] = p
            elif m := _SNAPSHOT.match(p.name):
                snapshots[int(m.group(1))] = p
        return segments, snapshots

    def recover(self) -> Recovered:
        """Read the latest snapshot and every later segment; cut a torn tail; open a new segment."""
        self.dir.mkdir(parents=True, exist_ok=True)
        segments, snapshots = self._listing()
        snap_seq = max(snapshots, default=-1)
        snapshot = None
        if snap_seq >= 0:
            records, _ = read_records(snapshots[snap_seq], last=False)
            snapshot = snapshot_from_records(records, str(snapshots[snap_seq]))
        result = Recovered(snapshot)
        replay = sorted(s for s in segments if s > snap_seq)
        for i, seq in enumerate(replay):
            path = segments[seq]
            events, torn = read_records(path, last=i == len(replay) - 1)
            result.events.extend(events)
            if torn is not None:
                with open(path, "r+b") as fh:
                    fh.truncate(torn)
                    os.fsync(fh.fileno())
                result.truncated.append(f"{path} at offset {torn}")
        leftovers = [p for s, p in segments.items() if s <= snap_seq]
        leftovers += [p for s, p in snapshots.items() if s < snap_seq]
        for path in [*leftovers, *self.dir.glob("snapshot-*.tmp")]:
            path.unlink(missing_ok=True)  # left over from a roll that died before finishing
        self._seq = max([snap_seq, *segments]) + 1
        self._open_segment()
        return result

    def _open_segment(self) -> None:
        path = self.dir / f"log-{self._seq:010d}"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = 0
        self._opened_at = self.clock.now_ms()
        self._fsync_dir()

    def _fsync_dir(self) -> None:
        if self.fsync:
            fsync_dir(self.dir)

    # --- writing -----------------------------------------------------------------------------

    def write(self, event: Event) -> None:
        """Write one event durably now (Spark's one-record ``write``); raises on failure."""
        self.write_bytes(encode_record(event.to_wire()))

    def write_bytes(self, data: bytes) -> None:
        """Append already-encoded records and fsync once: one group commit."""
        if self.closed or self._fd is None:
            raise LogClosed("the write-ahead log is closed")
        started = time.perf_counter()
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        if self.fsync:
            os.fdatasync(self._fd)
        WAL_FSYNC_SECONDS.observe(time.perf_counter() - started)
        self._size += len(data)

    def should_roll(self) -> bool:
        return self._size >= self.segment_bytes or (
            self._size > 0 and self.clock.now_ms() - self._opened_at >= self.segment_ms
        )

    def roll(self, snapshot: object) -> None:
        """Close the current segment, write ``snapshot`` (state after it), delete older history.

        ``snapshot`` must be the live state after every record written so far and nothing after.
        """
        assert self._fd is not None
        os.close(self._fd)
        self._fd = None
        path = self.dir / f"snapshot-{self._seq:010d}"
        atomic_write(path, snapshot_records(snapshot, self.piece_bytes), fsync=self.fsync)
        done = self._seq
        self._seq += 1
        self._open_segment()
        segments, snapshots = self._listing()
        for seq, old in [*segments.items(), *snapshots.items()]:
            if seq <= done and old != path:
                old.unlink(missing_ok=True)
        log.info("WAL rolled to segment %d after snapshot %s", self._seq, path.name)

    def close(self) -> None:
        if self._fd is not None:
            if self.fsync:
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        self.closed = True

    @property
    def segment(self) -> Path:
        return self.dir / f"log-{self._seq:010d}"
