"""Who a peer is: credentials bound to roles, so a role is what the credential gives, not what the
peer says.

- ``tracker.auth_token_file``: one full-access token (every role), for simple setups.
- ``tracker.receiver_token_file``: a token that may only say ``receiver``.
- ``tracker.driver_token_file``: a token that may only say ``driver``.
- ``tracker.receiver_tokens``: receiver tokens bound to streams (``{token file: [stream ids]}``):
  each may register receivers, and send their blocks, for those streams only.
- a client certificate (mutual TLS, ``tracker.tls_client_ca``) whose subject common name is a
  role: ``receiver``, ``driver`` or ``admin``; it gives that role alone (a certificate naming
  more than one role gives none).

A peer's :class:`Grant` also names its *principal*, the credential it proved: a live receiver id
registered under one principal cannot be taken over under another.  Tokens and certificates not
bound to streams serve every stream (the behaviour before stream binding).

Without any token or client CA the tracker is open: every peer may take every role (fit for
loopback only; :func:`sluice.tracker.wire.tls.check_exposure` refuses it elsewhere).  What each role may
send is the ``roles`` of each :class:`~sluice.tracker.wire.protocol.Op`.  Pure: tested without sockets.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from sluice.errors import InvalidArgument
from sluice.tracker.wire.protocol import ROLES

ALL_ROLES = frozenset(ROLES)

PeerCert = dict[str, Any]
"""A TLS peer's certificate as ``SSLSocket.getpeercert()`` returns it (``subject`` a tuple of
relative names, each a tuple of ``(key, value)`` pairs; ``serialNumber`` a string).  ``Any``
because typeshed names that type only privately, and the values differ by key."""


@dataclass(frozen=True)
class Grant:
    """What one hello proved: the roles, the streams a receiver may serve (``None``: every stream),
    and the principal (which credential: receiver ids are owned per principal)."""

    roles: frozenset[str]
    streams: frozenset[int] | None = None
    principal: str = "open"

    def serves(self, stream_id: int) -> bool:
        return self.streams is None or stream_id in self.streams


OPEN = Grant(ALL_ROLES)
NONE = Grant(frozenset(), frozenset(), "")


@dataclass(frozen=True)
class Credentials:
    """The tokens the tracker accepts, each with the roles it gives.

    :param tokens: (token, roles) pairs.
    :param cert_roles: client certificates give the role their common name names (mutual TLS).
    :param receiver_tokens: (token, streams) pairs: receiver tokens bound to those streams.
    """

    tokens: tuple[tuple[str, frozenset[str]], ...] = ()
    cert_roles: bool = False
    receiver_tokens: tuple[tuple[str, frozenset[int]], ...] = ()

    @classmethod
    def from_tokens(
        cls,
        full: str | None = None,
        receiver: str | None = None,
        driver: str | None = None,
        cert_roles: bool = False,
        receiver_tokens: dict[str, frozenset[int]] | None = None,
    ) -> Credentials:
        pairs = [
            (token, roles)
            for token, roles in (
                (full, ALL_ROLES),
                (receiver, frozenset({"receiver"})),
                (driver, frozenset({"driver"})),
            )
            if token
        ]
        bound = tuple((receiver_tokens or {}).items())
        if len({token for token, _ in pairs} | {token for token, _ in bound}) != len(pairs) + len(bound):
            raise InvalidArgument("the auth, receiver, driver and stream-bound token files must hold different tokens")
        return cls(tuple(pairs), cert_roles, bound)

    @property
    def open(self) -> bool:
        """No credential is needed: every peer gets every role."""
        return not self.tokens and not self.cert_roles and not self.receiver_tokens

    def grant(self, token: str | None, cert: PeerCert | None = None) -> Grant:
        """What a peer with ``token`` and TLS peer certificate ``cert`` proved (no roles: nothing).

        Every configured token is compared (constant time each), so the time taken does not say
        which one nearly matched.  A token wins over a certificate for the principal.
        """
        if self.open:
            return OPEN
        given = (token or "").encode()
        for i, (expected, roles) in enumerate(self.tokens):
            if hmac.compare_digest(given, expected.encode()):
                return Grant(roles, None, f"token#{i}")
        for i, (expected, streams) in enumerate(self.receiver_tokens):
            if hmac.compare_digest(given, expected.encode()):
                return Grant(frozenset({"receiver"}), streams, f"stream-token#{i}")
        if self.cert_roles and cert:
            named = cert_role(cert)
            if named:
                return Grant(named, None, "cert:" + _subject(cert))
        return NONE

    def roles(self, token: str | None, cert: PeerCert | None = None) -> frozenset[str]:
        """The roles a peer with ``token`` and TLS peer certificate ``cert`` may take (empty: none)."""
        return self.grant(token, cert).roles


def cert_role(cert: PeerCert) -> frozenset[str]:
    """The one role a client certificate names by its common name; none when it names no role, or
    more than one (a certificate with ``CN=receiver`` and ``CN=admin`` is ambiguous: refused)."""
    roles = {name for name in common_names(cert) if name in ALL_ROLES}
    return frozenset(roles) if len(roles) == 1 else frozenset()


def common_names(cert: PeerCert) -> list[str]:
    """The subject common names of a certificate as ``SSLSocket.getpeercert()`` returns it."""
    return [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]


def _subject(cert: PeerCert) -> str:
    """A certificate's identity for ownership: its serial number and subject."""
    subject = ",".join(f"{key}={value}" for rdn in cert.get("subject", ()) for key, value in rdn)
    return f"{cert.get('serialNumber', '?')}/{subject}"[:512]
