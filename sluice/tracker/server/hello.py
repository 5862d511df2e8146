"""What a ``hello`` proves: the version, the role, and the credential behind it, checked in one pure
function, so the server only counts, logs and replies.  A refusal names what is wrong and what
is allowed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from sluice.tracker.server.auth import Credentials, Grant, PeerCert
from sluice.tracker.wire.messages import HelloRequest, Request
from sluice.tracker.wire.protocol import (
    E_HELLO_REQUIRED,
    E_INVALID,
    E_UNAUTHORIZED,
    E_VERSION,
    PROTOCOL_VERSION,
    ROLES,
)


@dataclass(frozen=True)
class Refusal:
    """A refused first frame: ``reason`` labels the metric, ``code`` and ``message`` the reply."""

    reason: str
    code: str
    message: str


def check_hello(
    name: str, request: Request, credentials: Credentials, cert: PeerCert | None
) -> tuple[str, Grant] | Refusal:
    """The role and grant of a connection's first (checked) request, or why it is refused."""
    if name != "hello":
        return Refusal("no_hello", E_HELLO_REQUIRED, f"the first frame must be hello, got {name}")
    frame = cast(HelloRequest, request)  # the op is hello: check_request gave its type
    if frame["version"] != PROTOCOL_VERSION:
        return Refusal(
            "bad_version",
            E_VERSION,
            f"protocol version {frame['version']} is not supported; this tracker speaks {PROTOCOL_VERSION}",
        )
    role = frame["role"]
    if role not in ROLES:
        return Refusal("invalid", E_INVALID, f"role {role[:64]!r} is not one of {', '.join(ROLES)}")
    token = frame.get("token")
    grant = credentials.grant(token, cert)
    if role in grant.roles:
        return role, grant
    why = (
        "no credential"
        if not token and not cert
        else f"a credential for {', '.join(sorted(grant.roles))} only"
        if grant.roles
        else "a wrong auth token"
    )
    return Refusal(
        "unauthorized",
        E_UNAUTHORIZED,
        f"hello refused: role {role} needs its credential (token or client certificate); got {why}",
    )
