"""TLS on every hop to the tracker, and the tracker's refusal to be exposed without credentials.

Both sides require TLS 1.2 or newer.  A client verifies the tracker's certificate against
``tls_ca`` (hostname included) and may present ``tls_cert``/``tls_key``; the tracker requires a
client certificate signed by ``tracker.tls_client_ca`` when that is set, and takes the peer's role
from its common name (:mod:`sluice.tracker.server.auth`).
"""

from __future__ import annotations

import ipaddress
import logging
import ssl

from sluice.config import ConfigError

log = logging.getLogger(__name__)


def _load_chain(context: ssl.SSLContext, cert: str, key: str, what: str) -> None:
    if bool(cert) != bool(key):
        raise ConfigError(f"{what}.tls_cert and {what}.tls_key must be given together")
    if cert:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"{what}.tls_cert {cert} / {what}.tls_key {key} cannot be loaded: {exc}") from None


def _load_ca(context: ssl.SSLContext, ca: str, key: str) -> None:
    try:
        context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{key} {ca} cannot be loaded: {exc}") from None


def server_context(cert: str, key: str, client_ca: str = "") -> ssl.SSLContext | None:
    """The listener's context (None without a certificate); client certificates required with ``client_ca``."""
    if not cert and not key:
        if client_ca:
            raise ConfigError("tracker.tls_client_ca needs tracker.tls_cert and tracker.tls_key (a TLS listener)")
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert, key, "tracker")
    if client_ca:
        _load_ca(context, client_ca, "tracker.tls_client_ca")
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(section: str, ca: str, cert: str = "", key: str = "") -> ssl.SSLContext | None:
    """A receiver's or driver's context (None without ``tls_ca``): the tracker's certificate and
    hostname verified against ``ca``, our certificate presented when given."""
    if not ca:
        if cert or key:
            raise ConfigError(
                f"{section}.tls_cert/{section}.tls_key need {section}.tls_ca (the CA that signed the "
                "tracker's certificate)"
            )
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_ca(context, ca, f"{section}.tls_ca")
    _load_chain(context, cert, key, section)
    return context


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, *, has_credentials: bool, insecure: bool, tls: bool = False) -> None:
    """Refuse to serve anything but loopback without a token or client certificates, or with tokens
    but without TLS (they would travel in clear), unless the operator said ``tracker.insecure =
    true`` (logged loudly)."""
    if is_loopback(host) or (has_credentials and tls):
        return
    if has_credentials:
        if not insecure:
            raise ConfigError(
                f"tracker.listen = {host!r} is not loopback and tokens are configured without TLS: they "
                "would travel in clear; set tracker.tls_cert/tls_key (or tracker.insecure = true, not advised)"
            )
        log.warning("INSECURE: tracker.insecure = true: tokens travel in clear to %s (no TLS)", host)
        return
    if not insecure:
        raise ConfigError(
            f"tracker.listen = {host!r} is not loopback and no credential is configured: set "
            "tracker.auth_token_file, tracker.receiver_token_file/driver_token_file or "
            "tracker.tls_client_ca (or tracker.insecure = true to serve anyone, not advised)"
        )
    log.warning(
        "INSECURE: tracker.insecure = true and no credential: anyone who reaches %s may add blocks, "
        "allocate batches and publish rates",
        host,
    )
