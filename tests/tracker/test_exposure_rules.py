"""Credentials that must not travel or count in ways nobody meant: a token in clear to another
host, a certificate naming two roles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sluice.config_key import ConfigError
from sluice.embedded.processes import free_port, tracker_argv
from sluice.tracker.client.tracker_client import TrackerClient
from sluice.tracker.server.auth import Credentials


def test_a_certificate_naming_two_roles_gets_none():
    creds = Credentials.from_tokens(None, None, None, cert_roles=True)
    both = {"subject": ((("commonName", "receiver"),), (("commonName", "admin"),))}
    assert creds.roles(None, both) == frozenset()
    assert creds.roles(None, {"subject": ((("commonName", "admin"),),)}) == {"admin"}
    assert creds.roles(None, {"subject": ((("commonName", "receiver"),), (("commonName", "x"),))}) == {"receiver"}


def test_a_tracker_with_tokens_and_no_tls_refuses_a_non_loopback_address(tmp_path: Path):
    token = tmp_path / "token"
    token.write_text("s3cret-token-value-long-enough\n")
    token.chmod(0o600)
    result = subprocess.run(
        [
            sys.executable,
            *tracker_argv(f"0.0.0.0:{free_port()}", tmp_path / "wal", extra=["--auth-token-file", str(token)]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "tokens are configured without TLS: they would travel in clear" in result.stderr


@pytest.mark.parametrize("host", ["10.1.2.3", "tracker.example.com"])
def test_a_client_refuses_to_send_a_token_in_clear_to_another_host(host):
    with pytest.raises(ConfigError, match="the token would travel in clear"):
        TrackerClient(f"{host}:7000", "receiver", auth_token="t")
    TrackerClient(f"{host}:7000", "receiver")  # no token: nothing to leak
    TrackerClient("127.0.0.1:7000", "receiver", auth_token="t")  # loopback
