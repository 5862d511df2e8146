"""Who a peer is: credentials bound to roles, so a role is what the credential gives, not what the
peer says.

- ``tracker.auth_token_file``: one full-access token (every role), for simple setups.
- ``tracker.receiver_token_file``: a token that may only say ``receiver``.
- ``tracker.driver_token_file``: a token that may only say ``driver``.
- a client certificate (mutual TLS, ``tracker.tls_client_ca``) whose subject common name is a
  role: ``receiver``, ``driver`` or ``admin``; it gives that role alone (a certificate naming
  more than one role gives none).

Without any token or client CA the tracker is open: every peer may take every role (fit for
loopback only; :func:`sluice.tracker.tls.check_exposure` refuses it elsewhere).  What each role may
send is the ``roles`` of each :class:`~sluice.tracker.protocol.Op`.  Pure: tested without sockets.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from sluice.errors import InvalidArgument
from sluice.tracker.protocol import ROLES

ALL_ROLES = frozenset(ROLES)


@dataclass(frozen=True)
class Credentials:
    """The tokens the tracker accepts, each with the roles it gives.

    :param tokens: (token, roles) pairs.
    :param cert_roles: client certificates give the role their common name names (mutual TLS).
    """

    tokens: tuple[tuple[str, frozenset[str]], ...] = ()
    cert_roles: bool = False

    @classmethod
    def from_tokens(
        cls, full: str | None = None, receiver: str | None = None, driver: str | None = None, cert_roles: bool = False
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
        if len({token for token, _ in pairs}) != len(pairs):
            raise InvalidArgument("the auth, receiver and driver token files must hold different tokens")
        return cls(tuple(pairs), cert_roles)

    @property
    def open(self) -> bool:
        """No credential is needed: every peer gets every role."""
        return not self.tokens and not self.cert_roles

    def roles(self, token: str | None, cert: dict[str, Any] | None = None) -> frozenset[str]:
        """The roles a peer with ``token`` and TLS peer certificate ``cert`` may take (empty: none).

        Every configured token is compared (constant time each), so the time taken does not say
        which one nearly matched.
        """
        if self.open:
            return ALL_ROLES
        granted: set[str] = set()
        given = (token or "").encode()
        for expected, roles in self.tokens:
            if hmac.compare_digest(given, expected.encode()):
                granted |= roles
        if self.cert_roles and cert:
            granted |= cert_role(cert)
        return frozenset(granted)


def cert_role(cert: dict[str, Any]) -> frozenset[str]:
    """The one role a client certificate names by its common name; none when it names no role, or
    more than one (a certificate with ``CN=receiver`` and ``CN=admin`` is ambiguous: refused)."""
    roles = {name for name in common_names(cert) if name in ALL_ROLES}
    return frozenset(roles) if len(roles) == 1 else frozenset()


def common_names(cert: dict[str, Any]) -> list[str]:
    """The subject common names of a certificate as ``SSLSocket.getpeercert()`` returns it."""
    return [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
