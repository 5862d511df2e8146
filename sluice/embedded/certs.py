"""Test certificates made with ``openssl``: one CA, a server certificate for loopback and client
certificates by name, or a lone self-signed certificate, as PEM files in a directory the caller
owns.

One helper for every test that needs TLS (the Kafka broker's SSL listeners, the tracker's mutual
TLS, the metrics endpoints): the certificates are real X.509 chains that Java, OpenSSL and Python's
``ssl`` all verify, so a test exercises the same verification a deployment does, hostname checks
included.  Keys are EC P-256: generating one takes milliseconds where RSA 2048 takes a noticeable
share of a fast test, and Java's PEM keystores (Kafka's ``ssl.keystore.type=PEM``), OpenSSL and
Python load them alike.  Nothing here is meant for production: the keys are unencrypted and the CA
lives next to what it signs.
"""

from __future__ import annotations

import ipaddress
import secrets
import shutil
import ssl
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sluice.embedded.processes import ProcessError
from sluice.errors import InvalidArgument

__all__ = ["CertificateAuthority", "KeyPair", "self_signed"]

_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(args: Sequence[str], cwd: Path) -> None:
    """Run ``openssl``; a ProcessError with its own message when it fails or is missing."""
    if shutil.which("openssl") is None:
        raise ProcessError("openssl is not on PATH: install it (Debian: apt-get install openssl; make test does)")
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ProcessError(f"openssl {args[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def _subject(common_name: str) -> str:
    """``/CN=...`` with the characters OpenSSL's ``-subj`` parser treats specially escaped."""
    return "/CN=" + common_name.replace("\\", "\\\\").replace("/", "\\/").replace("+", "\\+")


@dataclass(frozen=True)
class KeyPair:
    """A certificate, its private key and the CA certificate that signed it (PEM files).

    :param name: the name it was issued under (its files are ``<name>.pem`` and ``<name>.key``).
    :param cert: the certificate.
    :param key: its unencrypted PKCS#8 private key.
    :param ca: the issuing CA's certificate, the trust anchor to verify it with.
    """

    name: str
    cert: Path
    key: Path
    ca: Path

    def client_context(self) -> ssl.SSLContext:
        """A client TLS context that presents this certificate and trusts only the CA (hostnames
        checked): what a mutual-TLS client, such as an aiokafka consumer's ``ssl_context``, needs."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca))
        context.load_cert_chain(str(self.cert), str(self.key))
        return context

    def server_context(self, client_ca: Path | None = None) -> ssl.SSLContext:
        """A server TLS context presenting this certificate; with ``client_ca``, clients must
        present a certificate that CA signed."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.cert), str(self.key))
        if client_ca is not None:
            context.load_verify_locations(cafile=str(client_ca))
            context.verify_mode = ssl.CERT_REQUIRED
        return context


class CertificateAuthority:
    """A CA in ``directory`` (``ca.pem``, ``ca.key``) that issues leaf certificates there.

    Issuing a name twice returns the first pair, so fixtures and tests may ask for the same client
    without coordinating.  The CA is made when this is constructed, or reused when ``directory``
    already holds one.

    :param directory: where the CA and every certificate it issues are written (created if missing).
    :param name: the CA's common name.
    :param days: how long the certificates are valid (a test run needs hours, not years).
    """

    def __init__(self, directory: Path, name: str = "sluice-test-ca", days: int = 7) -> None:
        self.directory = Path(directory)
        self.days = days
        self.cert = self.directory / "ca.pem"
        self.key = self.directory / "ca.key"
        self.directory.mkdir(parents=True, exist_ok=True)
        if not (self.cert.exists() and self.key.exists()):
            config = self.directory / "ca.cnf"
            config.write_text(
                "[req]\ndistinguished_name = dn\n[dn]\n[ca]\nbasicConstraints = critical,CA:TRUE\n"
                "keyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n"
            )
            _openssl(
                ["req", "-x509", *_KEY, "-days", str(days), "-subj", _subject(name), "-config", config.name]
                + ["-extensions", "ca", "-keyout", self.key.name, "-out", self.cert.name],
                self.directory,
            )

    def server(self, name: str = "server", hosts: Sequence[str] = ("127.0.0.1", "localhost")) -> KeyPair:
        """A server certificate valid for ``hosts`` (IP addresses and DNS names, as subject
        alternative names; the first is also the common name)."""
        return self.issue(name, common_name=hosts[0], hosts=hosts, usage="serverAuth,clientAuth")

    def client(self, name: str) -> KeyPair:
        """A client certificate whose common name is ``name`` (a broker or server maps it to its
        principal: Kafka's ``ssl.principal.mapping.rules``, the tracker's roles)."""
        return self.issue(name, common_name=name, usage="clientAuth")

    def issue(
        self, name: str, *, common_name: str | None = None, hosts: Sequence[str] = (), usage: str = "clientAuth"
    ) -> KeyPair:
        """A certificate signed by this CA, written to ``<name>.pem`` and ``<name>.key``.

        :param name: the files' name (letters, digits, ``-``, ``_`` and ``.``).
        :param common_name: the subject's CN (default ``name``).
        :param hosts: subject alternative names; each is an IP address when it parses as one.
        :param usage: the extended key usages, comma-separated (``serverAuth``, ``clientAuth``).
        """
        _check_name(name)
        pair = KeyPair(name, self.directory / f"{name}.pem", self.directory / f"{name}.key", self.cert)
        if pair.cert.exists() and pair.key.exists():
            return pair
        extensions = [
            "basicConstraints = critical,CA:FALSE",
            "keyUsage = critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage = {usage}",
            "subjectKeyIdentifier = hash",
            "authorityKeyIdentifier = keyid",
        ]
        if hosts:
            extensions.append("subjectAltName = " + ",".join(_alt_name(h) for h in hosts))
        ext = self.directory / f"{name}.ext"
        ext.write_text("\n".join(extensions) + "\n")
        csr = self.directory / f"{name}.csr"
        _openssl(
            ["req", "-new", *_KEY, "-subj", _subject(common_name or name), "-keyout", pair.key.name]
            + ["-out", csr.name],
            self.directory,
        )
        _openssl(
            ["x509", "-req", "-in", csr.name, "-CA", self.cert.name, "-CAkey", self.key.name]
            + ["-set_serial", f"0x{secrets.token_hex(16)}", "-days", str(self.days), "-extfile", ext.name]
            + ["-out", pair.cert.name],
            self.directory,
        )
        csr.unlink()
        ext.unlink()
        return pair

    def client_context(self, client: KeyPair | None = None) -> ssl.SSLContext:
        """A client TLS context trusting this CA, presenting ``client``'s certificate if given."""
        if client is not None:
            return client.client_context()
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.cert))


def self_signed(
    directory: Path,
    name: str = "server",
    *,
    common_name: str | None = None,
    hosts: Sequence[str] = (),
    days: int = 1,
) -> KeyPair:
    """A certificate that signs itself, written to ``<name>.pem`` and ``<name>.key`` in ``directory``.

    For a test where the certificate is its own trust anchor (a client trusts exactly the server's
    certificate, a server trusts exactly one client's), which a CA would only add a file to.  Its
    ``ca`` is itself.  Valid for serving and as a client certificate.

    :param name: the files' name (letters, digits, ``-``, ``_`` and ``.``).
    :param common_name: the subject's CN (default ``name``).
    :param hosts: subject alternative names; each is an IP address when it parses as one.
    :param days: how long it is valid.
    """
    _check_name(name)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(name, directory / f"{name}.pem", directory / f"{name}.key", directory / f"{name}.pem")
    lines = [
        "[req]",
        "distinguished_name = dn",
        "[dn]",
        "[leaf]",
        "basicConstraints = critical,CA:TRUE",
        "keyUsage = critical,digitalSignature,keyEncipherment,keyCertSign",
        "extendedKeyUsage = serverAuth,clientAuth",
        "subjectKeyIdentifier = hash",
    ]
    if hosts:
        lines.append("subjectAltName = " + ",".join(_alt_name(h) for h in hosts))
    config = directory / f"{name}.cnf"
    config.write_text("\n".join(lines) + "\n")
    _openssl(
        ["req", "-x509", *_KEY, "-days", str(days), "-subj", _subject(common_name or name), "-config", config.name]
        + ["-extensions", "leaf", "-keyout", pair.key.name, "-out", pair.cert.name],
        directory,
    )
    config.unlink()
    return pair


def _check_name(name: str) -> None:
    """Refuse a file name that could leave the directory or clash with the CA's own files."""
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith(".") or name == "ca":
        raise InvalidArgument(f"a certificate's file name must be letters, digits, '-', '_' or '.': {name!r}")


def _alt_name(host: str) -> str:
    """A subject alternative name: ``IP:`` for an address, ``DNS:`` for a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"DNS:{host}"
    return f"IP:{host}"
