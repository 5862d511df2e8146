"""The tracker's log on an object store: names, object contents, and the order recovery reads them.

Layout under the log's root (Delta Lake's ``_delta_log`` shape):

- ``log/<seq>``: one object per group commit, ``seq`` a zero-padded counter from 0.  Its first
  record is a header naming the writer (node id, the address clients reach it at, ``fence``);
  the rest are the events, each a record of :mod:`sluice.tracker.log.wal`'s form (length, CRC, msgpack).
  Objects are written put-if-absent, so exactly one writer gets each number: **whoever writes the
  next number is the leader**.  A tracker that opens the log writes a fence object (a header, no
  events) at the next number, so a deposed leader's next write fails its precondition.
- ``snapshot/<seq>/part-<i>`` and ``snapshot/<seq>/manifest``: the state after every object
  ``<= seq``, in pieces of at most ``tracker.wal_piece_bytes``; the manifest, written last, says
  how many pieces there are (a snapshot without one is incomplete and ignored).
- ``_last_snapshot``: the number of the latest snapshot, a hint so recovery reads one object
  instead of listing snapshots (Delta's ``_last_checkpoint``).  A hint only: a gap between the
  snapshot it names and the first log object left falls back to the newest complete manifest.
- ``_lease``: who leads and how recently it said so (:mod:`sluice.tracker.log.lease`).

Objects a snapshot covers are deleted after the pointer names it.  Nothing here opens a socket:
it runs against any :class:`~sluice.tracker.log.store.ObjectStore`, a directory in the unit tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sluice.errors import SluiceError
from sluice.tracker.log.store import ObjectStore
from sluice.tracker.log.wal import (
    MAX_RECORD,
    WALCorruption,
    encode_record,
    parse_records,
    snapshot_from_records,
    snapshot_records,
)

LOG_PREFIX = "log/"
SNAPSHOT_PREFIX = "snapshot/"
POINTER = "_last_snapshot"
FORMAT = 1
_LOG_KEY = re.compile(r"^log/(\d{20})$")
_MANIFEST = re.compile(r"^snapshot/(\d{20})/manifest$")
_ATTEMPTS = 8  # rereads when a concurrent leader deletes what a listing named
# Reads are bounded before the body is read (a foreign object in the prefix must not cost the
# memory it claims): the lease, the pointer and a manifest are one small record; a log object or a
# snapshot part holds at most what recovery accepts of a record.
SMALL_OBJECT_BYTES = 1 << 20
MAX_OBJECT_BYTES = MAX_RECORD


class Deposed(SluiceError, OSError):
    """Another tracker wrote the log's next object (or took the lease): this one no longer leads.

    :param leader: the address of the tracker that does, when known.
    """

    def __init__(self, message: str, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader


@dataclass(frozen=True)
class Writer:
    """One tracker process: a node id unique to this start, and the address clients reach it at."""

    node: str
    address: str


def log_key(seq: int) -> str:
    return f"{LOG_PREFIX}{seq:020d}"


def snapshot_key(seq: int, part: str) -> str:
    return f"{SNAPSHOT_PREFIX}{seq:020d}/{part}"


def encode_object(writer: Writer, records: bytes, *, fence: bool = False) -> bytes:
    """A log object: the writer's header, then ``records`` (already-encoded events)."""
    header = {"log": FORMAT, "node": writer.node, "address": writer.address, "fence": fence}
    return encode_record(header) + records


def decode_object(data: bytes, name: str) -> tuple[dict[str, object], list[Any]]:
    """The header and the events of a log object (an object is whole or absent: any damage is corruption)."""
    records, _ = parse_records(data, name, last=False)
    header = records[0] if records else None
    if not isinstance(header, dict) or header.get("log") != FORMAT:
        raise WALCorruption(f"{name} at offset 0: a log object opens with a header of format {FORMAT}")
    return header, records[1:]


def snapshot_objects(seq: int, state: object, piece_bytes: int) -> list[tuple[str, bytes]]:
    """The objects of a snapshot covering ``seq``, parts first and the manifest last."""
    manifest, *pieces = snapshot_records(state, piece_bytes)
    parts = [(snapshot_key(seq, f"part-{i:06d}"), piece) for i, piece in enumerate(pieces)]
    return [*parts, (snapshot_key(seq, "manifest"), manifest)]


def load_snapshot(store: ObjectStore, seq: int) -> object:
    """The state a complete snapshot holds, or ``None`` when its manifest or a part is missing."""
    got = store.get(snapshot_key(seq, "manifest"), SMALL_OBJECT_BYTES)
    if got is None:
        return None
    manifest = parse_records(got[0], f"{store.url}/{snapshot_key(seq, 'manifest')}", last=False)[0]
    count = manifest[0].get("snapshot_pieces") if manifest and isinstance(manifest[0], dict) else None
    if not isinstance(count, int):
        raise WALCorruption(f"{store.url}/{snapshot_key(seq, 'manifest')}: not a snapshot manifest")
    pieces = []
    for i in range(count):
        key = snapshot_key(seq, f"part-{i:06d}")
        part = store.get(key, MAX_OBJECT_BYTES)
        if part is None:
            return None
        pieces += parse_records(part[0], f"{store.url}/{key}", last=False)[0]
    return snapshot_from_records([*manifest, *pieces], f"{store.url}/{snapshot_key(seq, 'manifest')}")


def log_seqs(store: ObjectStore) -> list[int]:
    return sorted(int(m.group(1)) for key in store.keys(LOG_PREFIX) if (m := _LOG_KEY.match(key)))


def snapshot_seqs(store: ObjectStore) -> list[int]:
    """Numbers of the snapshots whose manifest exists, oldest first."""
    return sorted(int(m.group(1)) for key in store.keys(SNAPSHOT_PREFIX) if (m := _MANIFEST.match(key)))


def pointer(store: ObjectStore) -> int | None:
    got = store.get(POINTER, SMALL_OBJECT_BYTES)
    if got is None:
        return None
    records, _ = parse_records(got[0], f"{store.url}/{POINTER}", last=False)
    seq = records[0].get("seq") if records and isinstance(records[0], dict) else None
    return seq if isinstance(seq, int) else None


@dataclass
class CatchUp:
    """What a reader learns past its position.

    :param snapshot: a state to restart from (the reader's own is too old: what it needs was
        deleted under a snapshot), else ``None``.
    :param events: the events after the snapshot (or after the reader's position), in order.
    :param position: the number of the last object read (-1: the log is empty).
    :param header: the header of that object (who wrote it), or ``None``.
    :param gap: for a follower, ``(missing, found)`` when the log stops at a missing number with a
        later one present that no snapshot covers (an object written past the log's end).
    """

    snapshot: object = None  # as msgpack decoded it; the service checks it
    events: list[Any] = field(default_factory=list)  # msgpack values, as parse_records reads them
    position: int = -1
    header: dict[str, object] | None = None
    gap: tuple[int, int] | None = None


def catch_up(store: ObjectStore, position: int, *, follower: bool = False) -> CatchUp:
    """Read what follows ``position`` (-1: from the start), through a snapshot when the objects it
    needs are gone.  Rereads when a concurrent leader deletes what a listing named.

    A gap no snapshot covers refuses a tracker that opens the log; a ``follower`` (a standby) reads
    up to it instead, and says where it stopped (:attr:`CatchUp.gap`): the leader has not written
    that far, and the object past the end is none of its writes."""
    for _ in range(_ATTEMPTS):
        result = _catch_up_once(store, position, follower)
        if result is not None:
            return result
    raise WALCorruption(f"{store.url}: the log objects after {position} keep disappearing or leave a gap")


def _catch_up_once(store: ObjectStore, position: int, follower: bool) -> CatchUp | None:
    seqs = [s for s in log_seqs(store) if s > position]
    result = CatchUp(position=position)
    if position < 0 or not seqs or seqs[0] != position + 1:  # none left may mean: all rolled into a snapshot
        start = _snapshot_start(store, seqs, position)
        if start is not None:
            state = load_snapshot(store, start)
            if state is None:
                return None  # deleted under us by a newer snapshot: list again
            result.snapshot, result.position = state, start
            seqs = [s for s in seqs if s > start]
    expected = result.position + 1
    for seq in seqs:
        if seq != expected:
            if _retry_gap(store, expected):
                return None
            if follower:
                result.gap = (expected, seq)
                return result
            _gap(store, expected, seq)
        got = store.get(log_key(seq), MAX_OBJECT_BYTES)
        if got is None:
            return None
        result.header, events = decode_object(got[0], f"{store.url}/{log_key(seq)}")
        result.events += events
        result.position, expected = seq, seq + 1
    return result


def _snapshot_start(store: ObjectStore, seqs: list[int], position: int) -> int | None:
    """The snapshot to start from: the pointer's when it joins the objects left, else the newest
    complete one; ``None`` when there is none (a log that never rolled starts at object 0)."""
    hinted = pointer(store)
    first = seqs[0] if seqs else None
    if hinted is not None and hinted > position and (first is None or first <= hinted + 1):
        return hinted
    complete = [s for s in snapshot_seqs(store) if s > position and (first is None or first <= s + 1)]
    return complete[-1] if complete else None


def _retry_gap(store: ObjectStore, expected: int) -> bool:
    """A gap is retried while a snapshot covering it exists (its objects were being deleted)."""
    return any(s >= expected for s in snapshot_seqs(store))


def _gap(store: ObjectStore, expected: int, found: int) -> None:
    raise WALCorruption(
        f"{store.url}: log object {log_key(expected)} is missing (the next is {log_key(found)}) "
        "and no snapshot covers it; refusing to start"
    )
