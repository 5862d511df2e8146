"""Receiver registry and rate split (Spark's ``ReceiverTracker`` receiver bookkeeping).

Pure: time comes from an injectable clock (milliseconds), and the messages to push to receivers are
returned as ``(connection, message)`` pairs for the server to send, so tests drive it with a manual
clock and no sockets.  ``publish_rate`` logs ``RateUpdated`` before changing anything, so that a
restarted tracker still knows each stream's rate and hands receivers their share at registration.

Each registration gets its incarnation from the registry (never from the peer), above every one
handed out before, also by an earlier run (they start at the wall clock in microseconds), so the
block ids a receiver forms with it (``input-<stream>-<receiver>-<incarnation>-...``) are its own.
A receiver id belongs to the principal (credential) that registered it while it is registered:
another principal's registration of it is refused (naming the stream that owns it) until it leaves
or dies.  Registrations and departures are logged (``ReceiverRegistered``, ``ReceiverDeregistered``)
before they take effect, so a restarted tracker, or a standby that takes over, has every receiver
again with fresh liveness: the rate split goes on with the same shares, and the binding of an id to
its credential holds in the moment before its receiver registers again.  Receivers are indexed
by stream and by connection, so no registration, liveness or push scans every receiver.

Split: ``equal`` gives each live receiver ``rate / n``.  ``lag`` weights by the lag each reports
in heartbeats, but keeps 10% of the rate spread equally so that a caught-up receiver (lag 0) is
never throttled to nothing; without any reported lag it falls back to equal shares.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from sluice.block_info import InvalidMessage
from sluice.clock import Clock, SystemClock
from sluice.errors import InvalidArgument
from sluice.settings import TrackerSettings
from sluice.tracker.log.events import (
    Event,
    EventLog,
    LogWriteFailed,
    NullLog,
    RateUpdated,
    ReceiverDeregistered,
    ReceiverRegistered,
)
from sluice.tracker.server.limits import Forbidden, LimitReached
from sluice.tracker.server.metrics import RECEIVERS_DEAD
from sluice.tracker.wire.messages import ReceiverStatus
from sluice.tracker.wire.protocol import PUSH_STOP, PUSH_UPDATE_RATE

log = logging.getLogger(__name__)

_DEFAULTS = TrackerSettings()  # the schema's tracker.* defaults

Push = tuple[object, dict[str, object]]  # (the connection to push on, held by identity; the message)
LAG_EQUAL_PART = 0.1
LAG_CHANGE = 0.05  # in lag mode, push a new share only when it moved by more than 5%


class RegistrySnapshot(TypedDict):
    """:meth:`ReceiverRegistry.snapshot` (tuples are lists read back); one older than logged
    registrations has no ``receivers``."""

    rates: list[tuple[int, float]]
    receivers: NotRequired[list[tuple[str, int, str, str, int]]]  # id, stream, host, principal, incarnation


@dataclass
class ReceiverInfo:
    receiver_id: str
    stream_id: int
    host: str
    incarnation: int
    registered_ms: float
    last_seen_ms: float
    live: bool = True
    lag: int | None = None
    head_ts_ms: int | None = None  # with lag > 0: the Kafka timestamp of the last record it took
    open_transaction_records: int | None = None  # read_committed: held back past the last stable offsets
    share: float | None = None
    last_error: str = ""
    principal: str = "open"
    previous: int | None = None  # the incarnation this one superseded under the same principal
    conn: object = field(default=None, repr=False)  # the connection holding it, by identity

    def to_wire(self) -> ReceiverStatus:
        return {
            "receiver_id": self.receiver_id,
            "stream_id": self.stream_id,
            "host": self.host,
            "incarnation": self.incarnation,
            "live": self.live,
            "lag": self.lag,
            "head_ts_ms": self.head_ts_ms,
            "open_transaction_records": self.open_transaction_records,
            "rate": self.share,
            "last_seen_ms": int(self.last_seen_ms),
            "registered_ms": int(self.registered_ms),
            "last_error": self.last_error[:500],
        }


class ReceiverRegistry:
    """Receivers by id, liveness, and each stream's published rate and its split.

    :param log_: where rate updates are written before they take effect; ``None``: no log.
    :param clock: for liveness (a ``ManualClock`` in tests).
    :param liveness_timeout_ms: a receiver silent this long is dead.
    :param rate_split: ``equal`` shares, or by reported ``lag``.
    :param max_receivers: registrations of new receiver ids beyond this many are refused.
    """

    def __init__(
        self,
        *,
        log_: EventLog | None = None,
        clock: Clock | None = None,
        liveness_timeout_ms: int = _DEFAULTS.liveness_timeout_ms,
        rate_split: str = _DEFAULTS.rate_split,
        max_receivers: int = _DEFAULTS.max_receivers,
    ) -> None:
        if rate_split not in ("equal", "lag"):
            raise InvalidArgument(f"tracker.rate_split = {rate_split!r} is not allowed: expected equal or lag")
        self.log: EventLog = log_ if log_ is not None else NullLog()
        self.clock: Clock = clock or SystemClock()
        self.liveness_timeout_ms = liveness_timeout_ms
        self.rate_split = rate_split
        self.max_receivers = max_receivers
        self.receivers: dict[str, ReceiverInfo] = {}
        self.rates: dict[int, float] = {}
        self._by_stream: dict[int, dict[str, ReceiverInfo]] = {}  # only streams with a receiver
        self._by_conn: dict[object, set[str]] = {}
        self._last_incarnation = 0
        self.dirty: set[int] = set()  # streams whose split changed and is not pushed yet (see flush)

    # --- receivers ---------------------------------------------------------------------------

    def register(
        self,
        stream_id: int,
        receiver_id: str,
        host: str,
        conn: object = None,
        principal: str = "open",
        claimed_previous: int | None = None,
    ) -> tuple[float | None, list[Push]]:
        """(Re)register under a new incarnation; returns the receiver's current share and pushes.

        ``claimed_previous``: the incarnation the receiver says it held before; believed only when
        this tracker knows no registration of the id (its log is older than logged registrations,
        or the receiver expired meanwhile), so the blocks it re-sends keep their ids and deduplicate.

        Raises :class:`Forbidden` when the id is registered under another principal, and
        :class:`LimitReached` for a new id past ``max_receivers``.
        """
        if stream_id < 0 or not receiver_id:
            raise InvalidMessage("register_receiver needs stream_id >= 0 and a receiver_id")
        pushes: list[Push] = []
        now = self.clock.now_ms()
        old = self.receivers.get(receiver_id)
        if old is None and len(self.receivers) >= self.max_receivers:
            raise LimitReached(
                f"register_receiver {receiver_id[:64]}: tracker.max_receivers = {self.max_receivers} are registered"
            )
        if old is not None and old.principal != principal:
            raise Forbidden(
                f"receiver id {receiver_id[:64]} is registered to stream {old.stream_id} under another "
                "credential; it may be taken only after it deregisters or its liveness times out"
            )
        incarnation = max(self._last_incarnation + 1, time.time_ns() // 1000)
        self._write(ReceiverRegistered(receiver_id, stream_id, host, principal, incarnation))
        self._last_incarnation = incarnation
        if old is not None:
            if old.conn is not None and old.conn is not conn:
                pushes.append(
                    (
                        old.conn,
                        {
                            "op": PUSH_STOP,
                            "receiver_id": receiver_id,
                            "reason": f"superseded by incarnation {incarnation} on {host}",
                        },
                    )
                )
            self._remove(receiver_id)
        log.info(
            "receiver %s of stream %d registered from %s (incarnation %d)", receiver_id, stream_id, host, incarnation
        )
        info = ReceiverInfo(
            receiver_id,
            stream_id,
            host,
            incarnation,
            now,
            now,
            conn=conn,
            principal=principal,
            previous=old.incarnation if old is not None else _earlier(claimed_previous, incarnation),
            lag=old.lag if old and old.stream_id == stream_id else None,
        )
        self.receivers[receiver_id] = info
        self._by_stream.setdefault(stream_id, {})[receiver_id] = info
        if conn is not None:
            self._by_conn.setdefault(conn, set()).add(receiver_id)
        self.dirty.add(stream_id)
        info.share = self._share(stream_id, info)
        return info.share, pushes

    def _share(self, stream_id: int, info: ReceiverInfo) -> float | None:
        """The share :meth:`split` would give ``info`` now, without splitting among all (a registration
        must cost O(1), not O(receivers of the stream)): equal unless every receiver reported a lag."""
        rate = self.rates.get(stream_id)
        if rate is None:
            return None
        if self.rate_split == "lag" and info.lag is not None:  # a lag split may apply: it needs every lag
            return self.split(stream_id).get(info.receiver_id)
        return rate / len(self._by_stream[stream_id])

    def _write(self, event: Event) -> None:
        try:
            self.log.write(event)
        except Exception as exc:
            raise LogWriteFailed(f"could not log {type(event).__name__}: {exc}") from exc

    def held(self, receiver_id: str, conn: object) -> ReceiverInfo | None:
        """The receiver's registration if ``conn`` holds it (``None`` conn: an in-process caller, trusted)."""
        info = self.receivers.get(receiver_id)
        if info is None or conn is not None and info.conn is not conn:
            return None
        return info

    def _remove(self, receiver_id: str) -> ReceiverInfo | None:
        """Drop a receiver; its stream's split is pushed at the next :meth:`flush`."""
        info = self.receivers.pop(receiver_id, None)
        if info is not None:
            self.dirty.add(info.stream_id)
            peers = self._by_stream[info.stream_id]
            del peers[receiver_id]
            if not peers:
                del self._by_stream[info.stream_id]
            self._unbind(info)
        return info

    def _unbind(self, info: ReceiverInfo) -> None:
        held = self._by_conn.get(info.conn)
        if held is not None:
            held.discard(info.receiver_id)
            if not held:
                del self._by_conn[info.conn]
        info.conn = None

    def streams(self) -> dict[int, dict[str, ReceiverInfo]]:
        """Registered receivers per stream (only streams with at least one)."""
        return self._by_stream

    def of_connection(self, conn: object) -> list[ReceiverInfo]:
        """The registrations ``conn`` holds."""
        return [self.receivers[rid] for rid in self._by_conn.get(conn, ())]

    def flush(self) -> list[Push]:
        """The pushes of every stream whose receivers changed since the last flush.

        Registrations and departures only mark their stream: the server flushes a few times a
        second, so N receivers joining at once cost about N pushes, not N²/2 (each join changes
        every other receiver's equal share).  The joining receiver gets its share in the reply.
        """
        dirty, self.dirty = self.dirty, set()
        pushes: list[Push] = []
        for s in sorted(dirty):
            pushes += self._resplit(s, force=False)
        return pushes

    def deregister(self, receiver_id: str, reason: str = "", conn: object = None) -> list[Push]:
        """Drop the receiver; only the connection holding it may (:class:`Forbidden` otherwise)."""
        if receiver_id in self.receivers and self.held(receiver_id, conn) is None:
            raise Forbidden(f"deregister_receiver {receiver_id[:64]}: this connection does not hold its registration")
        if receiver_id in self.receivers:
            self._write(ReceiverDeregistered(receiver_id))
        info = self._remove(receiver_id)
        if info is not None:
            log.info(
                "receiver %s of stream %d deregistered: %s", receiver_id, info.stream_id, reason[:200] or "no reason"
            )
        return []

    def heartbeat(
        self,
        receiver_id: str,
        lag: int | None = None,
        conn: object = None,
        head_ts_ms: int | None = None,
        open_transaction_records: int | None = None,
    ) -> tuple[bool, list[Push]]:
        """False when the receiver is unknown or ``conn`` does not hold it (it should register again).

        ``head_ts_ms`` is kept only beside a positive lag: a caught-up receiver has no record
        waiting in Kafka, whatever it last took.
        """
        info = self.held(receiver_id, conn)
        if info is None:
            return False, []
        info.last_seen_ms = self.clock.now_ms()
        info.head_ts_ms = head_ts_ms if lag is not None and lag > 0 else None
        info.open_transaction_records = open_transaction_records
        if lag is not None:
            info.lag = max(0, lag)
        if self.rate_split == "lag" and lag is not None:
            return True, self._resplit(info.stream_id, force=False)
        return True, []

    def report_error(self, receiver_id: str, message: str, error: str = "", conn: object = None) -> None:
        info = self.held(receiver_id, conn)
        if info is not None:
            info.last_error = (message + (f": {error}" if error else ""))[:2000]

    def check_liveness(self) -> list[Push]:
        """Expire receivers silent past the timeout (they leave status; a heartbeat then answers
        known=False and the receiver registers again), and push their streams' new split."""
        now = self.clock.now_ms()
        dead = [info for info in self.receivers.values() if now - info.last_seen_ms > self.liveness_timeout_ms]
        for info in dead:
            try:
                self._write(ReceiverDeregistered(info.receiver_id))
            except LogWriteFailed:  # the log failed: the server stops; a replay expires it again
                pass
            self._remove(info.receiver_id)
            RECEIVERS_DEAD.labels(str(info.stream_id)).inc()
            log.warning(
                "receiver %s of stream %d is dead: silent for %.0f ms (timeout %d ms); forgotten",
                info.receiver_id,
                info.stream_id,
                now - info.last_seen_ms,
                self.liveness_timeout_ms,
            )
        return self.flush()

    def forget_connection(self, conn: object) -> None:
        """A connection closed: its receivers cannot be pushed to until they register again."""
        for receiver_id in list(self._by_conn.get(conn, ())):
            self._unbind(self.receivers[receiver_id])

    # --- rates -------------------------------------------------------------------------------

    def publish_rate(self, stream_id: int, rate: float) -> tuple[dict[str, float], list[Push]]:
        """Log and set the stream's rate; returns every live receiver's share and the pushes."""
        if not rate >= 0 or rate == float("inf"):
            raise InvalidMessage(f"publish_rate rate = {rate!r} is not allowed: expected a finite number >= 0")
        try:
            self.log.write(RateUpdated(stream_id, float(rate)))
        except Exception as exc:
            raise LogWriteFailed(f"could not log RateUpdated: {exc}") from exc
        self.rates[stream_id] = float(rate)
        self.dirty.discard(stream_id)
        pushes = self._resplit(stream_id, force=True)
        return self.shares(stream_id), pushes

    def apply(self, event: RateUpdated | ReceiverRegistered | ReceiverDeregistered) -> None:
        """Replay a logged rate or registration (a replayed registration is live from now, held by no
        connection until its receiver registers again)."""
        match event:
            case RateUpdated():
                self.rates[event.stream_id] = event.rate
            case ReceiverRegistered():
                self._replay(event.receiver_id, event.stream_id, event.host, event.principal, event.incarnation)
            case ReceiverDeregistered():
                self._remove(event.receiver_id)

    def _replay(self, receiver_id: str, stream_id: int, host: str, principal: str, incarnation: int) -> None:
        old = self._remove(receiver_id)
        now = self.clock.now_ms()
        info = ReceiverInfo(receiver_id, stream_id, host, incarnation, now, now, principal=principal)
        info.previous = old.incarnation if old is not None else None
        self.receivers[receiver_id] = info
        self._by_stream.setdefault(stream_id, {})[receiver_id] = info
        self._last_incarnation = max(self._last_incarnation, incarnation)

    def refresh(self) -> None:
        """Fresh liveness for every receiver: a standby taking over, whose copy replayed registrations
        but saw no heartbeat, gives each receiver a whole timeout to register again."""
        now = self.clock.now_ms()
        for info in self.receivers.values():
            info.last_seen_ms = now

    def shares(self, stream_id: int) -> dict[str, float]:
        return {r.receiver_id: r.share for r in self.live(stream_id) if r.share is not None}

    def live(self, stream_id: int) -> list[ReceiverInfo]:
        return [r for r in self._by_stream.get(stream_id, {}).values() if r.live]

    def live_counts(self) -> dict[int, int]:
        return {s: len(peers) for s, peers in self._by_stream.items()}

    def split(self, stream_id: int) -> dict[str, float]:
        """What each live receiver of the stream should get now (empty without a rate)."""
        rate = self.rates.get(stream_id)
        live = self.live(stream_id)
        if rate is None or not live:
            return {}
        n = len(live)
        lags = {r.receiver_id: r.lag for r in live if r.lag is not None}
        total = sum(lags.values())
        if self.rate_split == "lag" and total > 0 and len(lags) == n:
            return {rid: rate * (LAG_EQUAL_PART / n + (1 - LAG_EQUAL_PART) * lag / total) for rid, lag in lags.items()}
        return {r.receiver_id: rate / n for r in live}

    def _resplit(self, stream_id: int, *, force: bool) -> list[Push]:
        pushes: list[Push] = []
        for receiver_id, share in self.split(stream_id).items():
            info = self.receivers[receiver_id]
            old, info.share = info.share, share
            changed = old is None or abs(share - old) > (
                LAG_CHANGE * max(old, 1e-9) if self.rate_split == "lag" else 1e-9 * max(old, 1.0)
            )
            if info.conn is not None and (force or changed):
                pushes.append(
                    (
                        info.conn,
                        {"op": PUSH_UPDATE_RATE, "stream_id": stream_id, "receiver_id": receiver_id, "rate": share},
                    )
                )
        return pushes

    def snapshot(self) -> RegistrySnapshot:
        receivers = [(r.receiver_id, r.stream_id, r.host, r.principal, r.incarnation) for r in self.receivers.values()]
        return {"rates": [(s, r) for s, r in self.rates.items()], "receivers": receivers}

    def restore(self, snap: RegistrySnapshot) -> None:
        """Load a snapshot's rates and registrations (a snapshot older than logged registrations has none)."""
        self.rates = {int(s): float(r) for s, r in snap.get("rates", [])}
        for receiver_id, stream_id, host, principal, incarnation in snap.get("receivers", []):
            self._replay(str(receiver_id), int(stream_id), str(host), str(principal), int(incarnation))


__all__ = ["ReceiverRegistry", "ReceiverInfo", "LogWriteFailed"]


def _earlier(claimed: int | None, incarnation: int) -> int | None:
    """A claimed previous incarnation, if it is one this tracker could have given before now."""
    return claimed if claimed is not None and claimed < incarnation else None
