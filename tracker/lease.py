"""The leader's lease on a shared log: one small object, ``_lease``, renewed compare-and-set.

The leader rewrites it every third of ``lease_ms`` with ``If-Match`` on the ETag of its last write;
each write differs (a counter), so its ETag changes.  A standby reads it and times how long it
has stayed the same **by its own clock** (no clock is compared across hosts): unchanged for
``lease_ms`` means the leader is gone, and the standby takes it with ``If-Match`` on the ETag it
saw, so of several standbys one wins.  A read that fails restarts the standby's timing, so a store
outage is never read as a lapsed lease.

The lease only decides *when* to take over.  Safety comes from the log's fence: a leader that lost
its lease but still writes fails on the next log number (:mod:`sluice.tracker.log_protocol`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sluice.tracker.log_protocol import Deposed, Writer
from sluice.tracker.log_store import ObjectStore, PreconditionFailed
from sluice.tracker.wal import encode_record, parse_records

LEASE = "_lease"
_CLAIM_ATTEMPTS = 10


@dataclass(frozen=True)
class LeaseView:
    """What a standby saw: who holds the lease, since when (their wall clock, ms), and whether it lapsed."""

    node: str | None
    address: str | None
    since_ms: int | None
    lapsed: bool


class Lease:
    """One process's side of the lease: claim and renew as leader, observe and take as standby.

    :param lease_ms: how long an unchanged lease stays valid.
    :param monotonic: seconds, for timing a lease (``time.monotonic`` by default).
    """

    def __init__(
        self,
        store: ObjectStore,
        writer: Writer,
        lease_ms: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
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
            got = self.store.get(LEASE)
            try:
                self._etag = self.store.put_if_match(LEASE, self._body(), got[1] if got else None)
                return
            except PreconditionFailed:
                continue
        raise Deposed(f"{self.store.url}/{LEASE}: another tracker keeps rewriting the lease")

    def renew(self) -> None:
        """Extend the lease; raises :class:`Deposed` (naming the holder) when another took it."""
        try:
            self._etag = self.store.put_if_match(LEASE, self._body(), self._etag)
        except PreconditionFailed:
            holder = self._read()
            raise Deposed(
                f"{self.store.url}/{LEASE} is held by {holder.address or 'another tracker'}: this one no longer leads",
                leader=holder.address,
            ) from None

    def observe(self) -> LeaseView:
        """Read the lease and time it; a failed read restarts the timing (and raises)."""
        try:
            got = self.store.get(LEASE)
        except Exception:
            self._seen = None
            raise
        etag, now = (got[1] if got else None), self.monotonic()
        if self._seen is None or self._seen[0] != etag:
            self._seen = (etag, now)
        view = self._decode(got[0] if got else None)
        return LeaseView(view.node, view.address, view.since_ms, now - self._seen[1] >= self.lease_ms / 1000)

    def take(self) -> None:
        """Take a lapsed lease (after :meth:`observe`); raises PreconditionFailed when it moved meanwhile."""
        self.since_ms = int(time.time() * 1000)
        self._etag = self.store.put_if_match(LEASE, self._body(), self._seen[0] if self._seen else None)

    def _read(self) -> LeaseView:
        got = self.store.get(LEASE)
        return self._decode(got[0] if got else None)

    def _decode(self, data: bytes | None) -> LeaseView:
        if data is None:
            return LeaseView(None, None, None, False)
        records, _ = parse_records(data, f"{self.store.url}/{LEASE}", last=False)
        info = records[0] if records and isinstance(records[0], dict) else {}
        return LeaseView(info.get("node"), info.get("address"), info.get("since_ms"), False)
