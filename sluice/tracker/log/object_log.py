"""The leader's side of the log on an object store: :class:`ObjectLog` has the interface of
:class:`~sluice.tracker.log.wal.WriteAheadLog` (``recover``, ``write_bytes``, ``should_roll``, ``roll``,
``close``), so :class:`~sluice.tracker.log.group_commit.GroupCommit` writes one object per group.

Fencing is the put-if-absent of each object (:mod:`sluice.tracker.log.protocol`): when the number
this tracker writes next already exists and is not its own write, another tracker has taken the
log; :class:`~sluice.tracker.log.protocol.Deposed` fails the group, so the replies waiting on it
are never sent, and the tracker stops.  A store request that fails otherwise (the store is
unreachable) is retried with backoff for ``outage_s``, a snapshot's as well as a group's: while it
is, nothing is acknowledged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sluice.clock import Clock, SystemClock
from sluice.settings import TrackerSettings
from sluice.tracker.log.events import Event
from sluice.tracker.log.metrics import WAL_FSYNC_SECONDS
from sluice.tracker.log.protocol import (
    LOG_PREFIX,
    POINTER,
    SNAPSHOT_PREFIX,
    CatchUp,
    Deposed,
    Writer,
    catch_up,
    decode_object,
    encode_object,
    log_key,
    log_seqs,
    snapshot_objects,
    snapshot_seqs,
)
from sluice.tracker.log.store import ObjectStore, PreconditionFailed
from sluice.tracker.log.wal import LogClosed, Recovered, encode_record

log = logging.getLogger(__name__)

_DEFAULTS = TrackerSettings()
_FENCE_ATTEMPTS = 10
T = TypeVar("T")


class ObjectLog:
    """One object per group commit, numbered, put-if-absent; snapshots in parts; a fence at open.

    :param store: where the objects live.
    :param writer: this process (named in each object's header, so a deposed leader learns who leads).
    :param segment_bytes: snapshot after this many bytes of log objects ...
    :param segment_ms: ... or after this long (when something was written).
    :param piece_bytes: the most state one snapshot part holds.
    :param outage_s: how long a write is retried while the store does not answer, before the log fails.
    """

    def __init__(
        self,
        store: ObjectStore,
        writer: Writer,
        *,
        segment_bytes: int = _DEFAULTS.wal_segment_bytes,
        segment_ms: int = _DEFAULTS.wal_segment_ms,
        piece_bytes: int = _DEFAULTS.wal_piece_bytes,
        outage_s: float = 60.0,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.writer = writer
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.piece_bytes = piece_bytes
        self.outage_s = outage_s
        self.clock: Clock = clock or SystemClock()
        self.position = -1  # the last object this log wrote or read
        self._since_snapshot = 0
        self._snapshot_at = 0.0
        self.closed = False
        self.objects_written = 0

    # --- start -------------------------------------------------------------------------------

    def recover(self, start: CatchUp | None = None) -> Recovered:
        """Read the log (after ``start``, what a standby already holds), then fence it: the next
        number becomes this tracker's, and whoever wrote before can write no more.

        A fence that collides with another tracker's object is no deposition (this tracker has
        acknowledged nothing yet): that object is read too and the next number tried."""
        got = start if start is not None else catch_up(self.store, -1)
        result = Recovered(got.snapshot, list(got.events))
        self.position = got.position
        for _ in range(_FENCE_ATTEMPTS):
            fence = encode_object(self.writer, b"", fence=True)
            try:
                self._put(self.position + 1, fence)
                self._check_unused(self.position + 1)
            except (PreconditionFailed, Deposed):  # another tracker wrote there: read it too, then try the next
                more = catch_up(self.store, self.position)
                if more.snapshot is not None:
                    result = Recovered(more.snapshot, [])
                result.events += more.events
                self.position = more.position
                continue
            self.position += 1
            self._snapshot_at = self.clock.now_ms()
            log.info("log %s fenced at %s by %s", self.store.url, log_key(self.position), self.writer.address)
            return result
        raise Deposed(f"{self.store.url}: could not claim the next log number in {_FENCE_ATTEMPTS} tries")

    def _check_unused(self, seq: int) -> None:
        """Raise :class:`PreconditionFailed` when number ``seq`` (just written, put-if-absent) was
        another writer's before: its object deleted by that writer's snapshot, which covers it.

        Put-if-absent alone cannot tell: a leader that wrote ``seq`` and then rolled a snapshot over
        it leaves the number free, and a fence there would skip that leader's last acknowledged
        groups.  A roll writes its snapshot before it deletes, so every number written is held by
        its object or by a complete snapshot at or past it; our fence object is removed again, so
        no reader takes it for the log's next object.
        """
        if any(s >= seq for s in self._retrying("listing", lambda: snapshot_seqs(self.store))):
            self._retrying("deletion", lambda: self.store.delete([log_key(seq)]))
            raise PreconditionFailed(f"{self.store.url}/{log_key(seq)} is covered by a snapshot: written before")

    # --- writing -----------------------------------------------------------------------------

    def write(self, event: Event) -> None:
        """Write one event as its own object now (the pure state machine's log, in tests)."""
        self.write_bytes(encode_record(event.to_wire()))

    def write_bytes(self, data: bytes) -> None:
        """Write one group commit as the next object; raises Deposed when another tracker has it."""
        if self.closed:
            raise LogClosed("the write-ahead log is closed")
        started = time.perf_counter()
        self._put(self.position + 1, encode_object(self.writer, data))
        WAL_FSYNC_SECONDS.observe(time.perf_counter() - started)
        self.position += 1
        self._since_snapshot += len(data)
        self.objects_written += 1

    def _retrying(self, what: str, request: Callable[[], T]) -> T:
        """``request()``, retried with backoff while the store fails, for ``outage_s`` at most.

        A refused precondition is an answer, not a failure: it goes to the caller at once.
        """
        deadline = time.monotonic() + self.outage_s
        backoff = 0.05
        while True:
            try:
                return request()
            except PreconditionFailed:
                raise
            except Exception as exc:  # the store is unreachable or failing: the same request again
                if time.monotonic() >= deadline or self.closed:
                    raise
                log.warning("log %s failed (%s); retrying in %.2fs", what, exc, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    def _put(self, seq: int, body: bytes) -> None:
        """Put-if-absent; a lost reply's retry finds its own bytes, another's bytes depose this log."""
        key = log_key(seq)
        try:
            self._retrying(f"write of {key}", lambda: self.store.put_if_absent(key, body))
            return
        except PreconditionFailed:
            got = self._retrying(f"read of {key}", lambda: self.store.get(key))
        if got is not None and got[0] == body:
            return  # our own write, its reply lost and retried
        header = decode_object(got[0], f"{self.store.url}/{key}")[0] if got is not None else {}
        leader = header.get("address")
        raise Deposed(
            f"{self.store.url}/{key} was written by another tracker ({header.get('address', '?')}): "
            "this one no longer leads",
            leader=leader if isinstance(leader, str) else None,
        )

    def should_roll(self) -> bool:
        return self._since_snapshot >= self.segment_bytes or (
            self._since_snapshot > 0 and self.clock.now_ms() - self._snapshot_at >= self.segment_ms
        )

    def roll(self, snapshot: object) -> None:
        """Write ``snapshot`` (the state after the last object written) in parts, point at it,
        then delete the objects and snapshots it covers."""
        seq = self.position
        for key, body in snapshot_objects(seq, snapshot, self.piece_bytes):
            self._put_plain(key, body)  # a part a crashed roll left is replaced
        self._put_plain(POINTER, encode_record({"seq": seq}))  # a hint: recovery checks it joins the log
        covered = [log_key(s) for s in self._retrying("listing", lambda: log_seqs(self.store)) if s <= seq]
        snapshots = self._retrying("listing", lambda: self.store.keys(SNAPSHOT_PREFIX))
        old = [k for k in snapshots if not k.startswith(f"{SNAPSHOT_PREFIX}{seq:020d}/")]
        self._retrying("deletion", lambda: self.store.delete(covered + old))
        self._since_snapshot = 0
        self._snapshot_at = self.clock.now_ms()
        log.info("log %s: snapshot at %s, %d objects deleted", self.store.url, log_key(seq), len(covered))

    def _put_plain(self, key: str, body: bytes) -> None:
        self._retrying(f"write of {key}", lambda: self.store.put(key, body))

    def close(self) -> None:
        self.closed = True

    @property
    def segment(self) -> str:
        """The object written next (named in errors)."""
        return f"{self.store.url}/{LOG_PREFIX}{self.position + 1:020d}"
