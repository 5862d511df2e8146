"""The leader's lease on a shared log: one small object, ``_lease``, renewed compare-and-set.

The leader rewrites it every third of ``lease_ms`` with ``If-Match`` on the ETag of its last write;
each write differs (a counter), so its ETag changes.  A standby reads it and times how long it
has stayed the same **by its own clock** (no clock is compared across hosts): unchanged for
``lease_ms`` means the leader is gone, and the standby takes it with ``If-Match`` on the ETag it
saw, so of several standbys one wins.  Any read of the store that fails (the lease's or the log's)
restarts the standby's timing (:meth:`Lease.forget`), so a store outage is never read as a lapsed
lease.

The lease only decides *when* to take over.  Safety comes from the log's fence: a leader that lost
its lease but still writes fails on the next log number (:mod:`sluice.tracker.log.protocol`).

A store that stops answering must not cost a takeover once it answers again.  The standby starts
timing at its first good read after the outage, so the leader has ``lease_ms`` from then to renew.
Each lease request is one attempt bounded by a sixth of the lease (:func:`request_timeout_s`), and a
failed renewal is retried after a twelfth (:func:`renewal_delay_s`): a request caught in the outage
gives up within a third (a sixth to connect, a sixth to read), the next one starts a twelfth later,
so the leader renews well within half the lease of the store coming back.  (With the log's own
timeouts, two attempts of 2 s to connect and 5 s to read, one renewal could outlast a 6 s lease.)

A renewal, all its attempts together, has a deadline: half the lease from its first attempt
(:func:`renewal_deadline_s`).  It starts a third of the lease after the last renewal that
succeeded, so its deadline falls five sixths of the lease after that one: a sixth before any
standby, timing the lease from no earlier than that write, could take it.  A leader whose renewal
misses the deadline may have been deposed without hearing of it, so it holds its replies
(:mod:`sluice.tracker.server.standby`) until a renewal succeeds again, which proves the lease was
still its own: acknowledgements never outlive the lease they rest on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sluice.errors import SluiceError
from sluice.tracker.log.protocol import SMALL_OBJECT_BYTES, Deposed, Writer
from sluice.tracker.log.store import ObjectStore, ObjectTooLarge, PreconditionFailed
from sluice.tracker.log.wal import WALCorruption, encode_record, parse_records

LEASE = "_lease"
_CLAIM_ATTEMPTS = 10


def request_timeout_s(lease_ms: int) -> float:
    """How long one lease request may take to connect, and again to read: a sixth of the lease."""
    return lease_ms / 6000


def renewal_deadline_s(lease_ms: int) -> float:
    """How long one renewal, every attempt of it, may take before the leader holds its replies: half the lease."""
    return lease_ms / 2000


class RenewalLate(SluiceError, TimeoutError):
    """A lease renewal's deadline passed before its next request: that request is not made (the
    leader holds its replies meanwhile, and the next renewal tries again)."""

    retriable = True


def renewal_delay_s(lease_ms: int, failed: bool) -> float:
    """The pause before the next renewal: a third of the lease, a twelfth after one that failed."""
    return lease_ms / (12000 if failed else 3000)


@dataclass(frozen=True)
class LeaseView:
    """What a standby saw: who holds the lease, since when (their wall clock, ms), and whether it lapsed."""

    node: str | None
    address: str | None
    since_ms: int | None
    lapsed: bool
    exists: bool = True  # False: no lease object at all (a log no tracker leads yet)


class Lease:
    """One process's side of the lease: claim and renew as leader, observe and take as standby.

    :param lease_ms: how long an unchanged lease stays valid.
    :param monotonic: seconds, for timing a lease (``time.monotonic`` by default).
    :param on_foreign: told ``(name, why)`` of a ``_lease`` that is no lease record (a foreign
        write); such a lease names no holder, and its ETag is timed like any other, so it lapses
        and is taken over as a silent leader's would be.
    """

    def __init__(
        self,
        store: ObjectStore,
        writer: Writer,
        lease_ms: int,
        monotonic: Callable[[], float] = time.monotonic,
        on_foreign: Callable[[str, str], None] = lambda name, why: None,
    ) -> None:
        self.store = store
        self.on_foreign = on_foreign
        self.writer = writer
        self.lease_ms = lease_ms
        self.monotonic = monotonic
        self.since_ms: int | None = None  # when this process took the lease (wall clock, ms)
        self._etag: str | None = None  # of our last write, while we hold it
        self._renewals = 0
        self._seen: tuple[str | None, float] | None = None  # (ETag observed, when first observed)

    def _body(self) -> bytes:
        self._renewals += 1
        return encode_record(
            {"node": self.writer.node, "address": self.writer.address, "since_ms": self.since_ms, "n": self._renewals}
        )

    def claim(self) -> None:
        """Take the lease whoever holds it: a leader starting (its fence is what stops the other)."""
        self.since_ms = int(time.time() * 1000)
        for _ in range(_CLAIM_ATTEMPTS):
            got = self._get()
            try:
                self._etag = self.store.put_if_match(LEASE, self._body(), got[1] if got else None)
                return
            except PreconditionFailed:
                continue
        raise Deposed(f"{self.store.url}/{LEASE}: another tracker keeps rewriting the lease")

    def renew(self, deadline: float | None = None) -> None:
        """Extend the lease; raises :class:`Deposed` (naming the holder) when another took it.

        A renewal whose reply was lost may have been written: the lease then names this process
        (a taker writes its own node), so its ETag is adopted and the renewal made again.

        :param deadline: by :attr:`monotonic`; no request is begun after it (:class:`RenewalLate`).
        """

        def before_request() -> None:
            if deadline is not None and self.monotonic() >= deadline:
                raise RenewalLate(f"{self.store.url}/{LEASE}: the renewal's deadline passed before its next request")

        before_request()
        try:
            self._etag = self.store.put_if_match(LEASE, self._body(), self._etag)
            return
        except PreconditionFailed:
            before_request()
            got = self._get()
        holder = self._decode(got)
        if got is not None and holder.node == self.writer.node:
            before_request()
            self._etag = self.store.put_if_match(LEASE, self._body(), got[1])
            return
        raise Deposed(
            f"{self.store.url}/{LEASE} is held by {holder.address or 'another tracker'}: this one no longer leads",
            leader=holder.address,
        )

    def observe(self) -> LeaseView:
        """Read the lease and time it; a failed read restarts the timing (and raises)."""
        try:
            got = self._get()
        except Exception:
            self.forget()
            raise
        etag, now = (got[1] if got else None), self.monotonic()
        if self._seen is None or self._seen[0] != etag:
            self._seen = (etag, now)
        view = self._decode(got)
        lapsed = now - self._seen[1] >= self.lease_ms / 1000
        return LeaseView(view.node, view.address, view.since_ms, lapsed, got is not None)

    def forget(self) -> None:
        """Restart the timing: while the store did not answer, no one saw whether the lease moved."""
        self._seen = None

    def take(self) -> None:
        """Take a lapsed lease (after :meth:`observe`); raises PreconditionFailed when it moved meanwhile."""
        self.since_ms = int(time.time() * 1000)
        self._etag = self.store.put_if_match(LEASE, self._body(), self._seen[0] if self._seen else None)

    def _get(self) -> tuple[bytes, str] | None:
        """The lease object, or ``None``; one too large for a lease is foreign: reported, then read
        as empty (no holder) and timed by its ETag."""
        try:
            return self.store.get(LEASE, SMALL_OBJECT_BYTES)
        except ObjectTooLarge as exc:
            self.on_foreign(f"{LEASE}@{exc.etag}", str(exc))
            return b"", exc.etag

    def _decode(self, got: tuple[bytes, str] | None) -> LeaseView:
        if got is None:
            return LeaseView(None, None, None, False, exists=False)
        name = f"{self.store.url}/{LEASE}"
        try:
            records, _ = parse_records(got[0], name, last=False)
        except WALCorruption as exc:
            records, why = [], str(exc)
        else:
            why = f"{name} holds {records[0]!r:.80} where a lease record belongs" if records else f"{name} is empty"
        info = records[0] if records and isinstance(records[0], dict) else None
        if info is None or not isinstance(info.get("node"), str) or not isinstance(info.get("address"), str):
            self.on_foreign(f"{LEASE}@{got[1]}", why)
            return LeaseView(None, None, None, False)
        since = info.get("since_ms")
        return LeaseView(info["node"], info["address"], since if isinstance(since, int) else None, False)
