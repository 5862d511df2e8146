"""Basic auth of the metrics endpoints: checking a password against its bcrypt hash, remembering the
passwords that checked out, and bounding what failed attempts may cost.

A bcrypt round takes tens of milliseconds of CPU by design, and a request needs no credentials to
ask for one: checked each time, a client sending wrong passwords as fast as it can keeps a core
busy, and Prometheus's own scrapes, with the right password, queue behind its rounds until they
time out.  So:

- a password that checked out is remembered, per user, as a keyed digest (HMAC-SHA-256 under a key
  drawn at start, never the password), and a scrape with it is compared in constant time against
  that digest instead of running bcrypt, as exporter-toolkit caches its successes;
- a round is run only for a client address with a token left in its bucket (:class:`PeerLimiter`:
  :data:`FAILURE_BURST` at once, then :data:`FAILURES_PER_S`); a success gives its token back, so
  only failures are counted.  The table of addresses is bounded, the least recently seen forgotten;
- a password over bcrypt's 72 bytes is refused without a round, as Go's bcrypt (exporter-toolkit's)
  refuses it: the Python library raises for it, and bcrypt would only have read its first 72 bytes.

The server (:mod:`sluice.exposition`) runs the rounds on one thread off its event loop and bounds
how many may wait; everything else here is cheap and runs on the loop.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import bcrypt

MAX_PASSWORD_BYTES = 72  # bcrypt reads no more
FAILURE_BURST = 5  # bcrypt rounds a client address may fail at once
FAILURES_PER_S = 1.0  # and then per second
MAX_PEERS = 4096  # client addresses whose failures are remembered
# checked in place of an unknown user's hash, so an unknown name costs the same bcrypt round as a
# known one with a wrong password and response times do not tell which names exist
_DUMMY_HASH = b"$2b$10$utgefYaSK66Yugn7vLhtcei.Pa4qy1vHJlIAvdMgUAb5.Wo8Gv/RO"
_NOTHING = bytes(32)  # the digest compared against for a user with no remembered password


@dataclass(frozen=True)
class Credentials:
    """The user and password of one ``Authorization: Basic`` header, as sent (bytes)."""

    user: bytes
    password: bytes

    def __repr__(self) -> str:  # never the password, in a log line or a traceback
        return f"Credentials(user={self.user!r})"


def parse(header: bytes | None) -> Credentials | None:
    """The credentials of an ``Authorization`` header's value (None: absent, not Basic, not base64
    or without a colon)."""
    scheme, _, encoded = (header or b"").strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except binascii.Error:
        return None
    user, colon, password = decoded.partition(b":")
    return Credentials(user, password) if colon else None


class BasicAuth:
    """Checks credentials against bcrypt hashes by user name.

    :meth:`remembered` is cheap and runs anywhere; :meth:`verify` runs a bcrypt round and is meant
    for one thread off the event loop.  The remembered digests are a dict replaced one entry at a
    time, which the other thread reads safely under the GIL.
    """

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self.users = {name.encode(): hashed for name, hashed in users.items()}
        self.rounds = 0  # bcrypt rounds run: what failed attempts have cost
        self._key = os.urandom(32)
        self._accepted: dict[bytes, bytes] = {}  # user -> digest of the password its hash accepted

    def _stored(self, user: bytes) -> tuple[bytes, bool]:
        hashed, known = _DUMMY_HASH, False
        for name, stored in self.users.items():  # every name compared, in constant time each
            if hmac.compare_digest(name, user):
                hashed, known = stored, True
        return hashed, known

    def _digest(self, credentials: Credentials, hashed: bytes) -> bytes:
        return hmac.digest(self._key, b"\0".join((credentials.user, hashed, credentials.password)), hashlib.sha256)

    def remembered(self, credentials: Credentials) -> bool:
        """Whether these are a user and the password its hash last accepted (no bcrypt round)."""
        hashed, known = self._stored(credentials.user)
        accepted = self._accepted.get(credentials.user, _NOTHING) if known else _NOTHING
        return hmac.compare_digest(self._digest(credentials, hashed), accepted) and known

    def verify(self, credentials: Credentials) -> bool:
        """Whether the password matches the user's hash, by a bcrypt round; a match is remembered."""
        if len(credentials.password) > MAX_PASSWORD_BYTES:
            return False
        hashed, known = self._stored(credentials.user)
        self.rounds += 1
        if not bcrypt.checkpw(credentials.password, hashed) or not known:
            return False
        self._accepted[credentials.user] = self._digest(credentials, hashed)
        return True

    def allows(self, header: bytes | None) -> bool:
        """Whether the value of an ``Authorization`` header (None: absent) names a user and their
        password: remembered, else checked by a round on the calling thread."""
        credentials = parse(header)
        return credentials is not None and (self.remembered(credentials) or self.verify(credentials))


class PeerLimiter:
    """A token bucket per client address: :data:`FAILURE_BURST` tokens, :data:`FAILURES_PER_S`
    back each second, at most :data:`MAX_PEERS` addresses (the least recently seen forgotten: a
    forgotten address starts again with a full bucket, which costs at most one burst)."""

    def __init__(
        self,
        burst: int = FAILURE_BURST,
        per_s: float = FAILURES_PER_S,
        peers: int = MAX_PEERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst, self.per_s, self.peers, self.clock = burst, per_s, peers, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, when counted); oldest first

    def take(self, peer: str) -> bool:
        """Take a token of ``peer``'s bucket; False when it is empty."""
        now = self.clock()
        tokens, then = self._buckets.pop(peer, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) * self.per_s)
        taken = tokens >= 1.0
        self._buckets[peer] = (tokens - 1.0 if taken else tokens, now)  # now the most recently seen
        while len(self._buckets) > self.peers:
            del self._buckets[next(iter(self._buckets))]
        return taken

    def give_back(self, peer: str) -> None:
        """Return the token a success took: only failures count."""
        if peer in self._buckets:
            tokens, then = self._buckets[peer]
            self._buckets[peer] = (min(float(self.burst), tokens + 1.0), then)

    def __len__(self) -> int:
        return len(self._buckets)
