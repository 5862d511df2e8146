"""The metrics endpoints' web configuration file (exporter-toolkit's format), without sockets: what
is read and what is refused at start, and how."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import bcrypt
import pytest

from sluice.config_key import ConfigError
from sluice.embedded.certs import self_signed
from sluice.metrics_web_config import load

KEY = "tracker.metrics_web_config"
HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()  # cost 4: a fast test, still bcrypt


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    self_signed(d, hosts=("127.0.0.1", "localhost"))
    return d


def write(d: Path, text: str) -> str:
    path = d / "web.yml"
    path.write_text(text)
    return str(path)


def test_an_empty_setting_is_plain_http() -> None:
    assert load("", KEY) is None


def test_tls_and_users_are_read_with_paths_relative_to_the_file(pki: Path) -> None:
    web = load(
        write(
            pki,
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  min_version: TLS13\n"
            f"basic_auth_users:\n  prometheus: '{HASH}'\n",
        ),
        KEY,
    )
    assert web is not None and web.tls is not None
    assert web.tls.minimum_version == ssl.TLSVersion.TLSv1_3
    assert web.tls.verify_mode == ssl.CERT_NONE
    assert web.users == {"prometheus": HASH.encode()}


def test_a_client_ca_requires_client_certificates_by_default(pki: Path) -> None:
    web = load(
        write(
            pki, "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_ca_file: server.pem\n"
        ),
        KEY,
    )
    assert web is not None and web.tls is not None
    assert web.tls.verify_mode == ssl.CERT_REQUIRED
    assert web.tls.minimum_version == ssl.TLSVersion.TLSv1_2


TLS = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("tls_config:\n  cert_file: x\n", "unknown key 'tls_config' in the file; did you mean 'tls_server_config'?"),
        (TLS + "  cipher_suites: [x]\n", "unknown key 'cipher_suites' in tls_server_config; allowed: cert_file,"),
        ("tls_server_config:\n  cert_file: gone.pem\n  key_file: server.key\n", "gone.pem / key_file"),
        ("tls_server_config:\n  cert_file: server.pem\n", "needs both cert_file and key_file"),
        ("tls_server_config: {}\n", "tls_server_config needs both cert_file and key_file (for plain HTTP, leave"),
        ("tls_server_config:\n", "tls_server_config needs both cert_file and key_file (for plain HTTP, leave"),
        ("basic_auth_users: " + "[" * 50_000 + "]" * 50_000 + "\n", "nests too deep to read; allowed: the two levels"),
        (TLS + "  client_auth_type: RequireAnyClientCert\n", "allowed: NoClientCert, RequireAndVerifyClientCert"),
        (TLS + "  client_auth_type: RequireAndVerifyClientCert\n", "RequireAndVerifyClientCert needs client_ca_file"),
        (TLS + "  min_version: TLS11\n", "min_version is 'TLS11'; allowed: TLS12, TLS13"),
        ("basic_auth_users:\n  prometheus: secret\n", "basic_auth_users.prometheus is not a bcrypt hash"),
        ("basic_auth_users:\n  - prometheus\n", "basic_auth_users must be a mapping"),
        ("- tls_server_config\n", "the file must be a mapping"),
        ("tls_server_config: [\n", "cannot be read as YAML"),
    ],
)
@pytest.mark.slow
def test_a_bad_file_is_refused_naming_the_setting_the_file_and_what_is_allowed(pki: Path, text: str, said: str) -> None:
    path = write(pki, text)
    with pytest.raises(ConfigError) as refused:
        load(path, KEY)
    message = str(refused.value)
    assert message.startswith(f"{KEY} {path}: ") and said in message
    assert "\n" not in message


def test_a_missing_file_is_refused() -> None:
    with pytest.raises(ConfigError, match=f"^{KEY} /nonexistent/web.yml does not exist$"):
        load("/nonexistent/web.yml", KEY)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "web.yml"
    os.mkfifo(fifo)
    with pytest.raises(
        ConfigError, match=f"^{KEY} {fifo} is a FIFO; allowed: a regular file of at most 1,048,576 bytes$"
    ):
        load(str(fifo), KEY)
