"""The systemd units pass ``systemd-analyze verify`` and their environment files use real keys."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from sluice.config import SCHEMA
from tests.deploy.conftest import DEPLOY, need_tool

SYSTEMD = DEPLOY / "systemd"
UNITS = ("sluice-tracker.service", "sluice-receiver@.service", "sluice-driver.service")
PREFIX = "/opt/sluice/.venv/bin"


def test_units_verify(tmp_path: Path) -> None:
    """Verify copies whose ExecStart points at stub executables.

    ``verify`` refuses a unit whose binary is missing, and the units name the installed path
    (/opt/sluice); the stubs let it check everything else. Unknown keys are only warnings to
    systemd, so any output naming a unit fails the test too.
    """
    tool = need_tool("systemd-analyze", "Debian package systemd")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sluice-tracker", "sluice-receiver", "sluice-driver"):
        stub = bin_dir / name
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
    units = tmp_path / "units"
    units.mkdir()
    for unit in UNITS:
        text = (SYSTEMD / unit).read_text()
        assert PREFIX in text, f"{unit} does not start {PREFIX}/..."
        (units / unit).write_text(text.replace(PREFIX, str(bin_dir)))
    targets = ["./sluice-tracker.service", "./sluice-receiver@1.service", "./sluice-driver.service"]
    result = subprocess.run(
        [tool, "verify", "--man=no", *targets], cwd=units, capture_output=True, text=True, timeout=60
    )
    output = result.stdout + result.stderr
    if result.returncode != 0 and "System has not been booted with systemd" in output:
        pytest.skip(
            "systemd is not PID 1 on this machine, so units cannot be verified: " + output.strip().splitlines()[0]
        )
    assert result.returncode == 0, output
    complaints = [line for line in output.splitlines() if "sluice-" in line]
    assert not complaints, "\n".join(complaints)


def _env_files() -> list[Path]:
    return sorted(SYSTEMD.glob("*.env"))


@pytest.mark.parametrize("path", _env_files(), ids=lambda p: p.name)
def test_env_files_use_schema_keys_with_valid_values(path: Path) -> None:
    """Each SLUICE_* variable (commented examples too) is a schema key, and its value is allowed."""
    by_env = {k.env: k for k in SCHEMA}
    for line in path.read_text().splitlines():
        match = re.match(r"#?\s*(SLUICE_[A-Z0-9_]+)=(.*)$", line.strip())
        if not match:
            continue
        name, value = match.groups()
        assert name in by_env, f"{path.name}: {name} is not a configuration key"
        if not line.startswith("#"):
            by_env[name].coerce(value, f"{path.name}")


def test_each_unit_reads_its_environment_file() -> None:
    for unit, env in (
        ("sluice-tracker.service", "tracker.env"),
        ("sluice-driver.service", "driver.env"),
        ("sluice-receiver@.service", "receiver.env"),
    ):
        text = (SYSTEMD / unit).read_text()
        assert f"EnvironmentFile=/etc/sluice/{env}" in text
        assert (SYSTEMD / env).exists()
    assert "EnvironmentFile=-/etc/sluice/receiver-%i.env" in (SYSTEMD / "sluice-receiver@.service").read_text()


def test_receiver_instances_have_distinct_metrics_ports_matching_prometheus() -> None:
    ports = []
    for env in SYSTEMD.glob("receiver-*.env"):
        ports += re.findall(r"^SLUICE_RECEIVER_METRICS_PORT=(\d+)", env.read_text(), re.M)
    assert len(ports) == len(set(ports)) >= 2
    scrape = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    for port in ports:
        assert f"127.0.0.1:{port}" in scrape


def _env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line.startswith("SLUICE_"))
    return dict(pairs)


def test_deployed_tracker_and_clients_hold_role_credentials_and_store_roots() -> None:
    """The tracker listens beyond loopback, so it must name credentials (or it refuses to start);
    each client holds its own role's token, and both ends name the block store."""
    from sluice.tracker.wire.tls import check_exposure

    tracker, receiver, driver = (_env(SYSTEMD / f"{name}.env") for name in ("tracker", "receiver", "driver"))
    check_exposure(
        tracker["SLUICE_TRACKER_LISTEN"].rpartition(":")[0],
        insecure=False,
        has_credentials=bool(tracker.get("SLUICE_TRACKER_RECEIVER_TOKEN_FILE")),
        tls=bool(tracker.get("SLUICE_TRACKER_TLS_CERT")),
    )
    assert receiver.get("SLUICE_RECEIVER_TLS_CA") and driver.get("SLUICE_DRIVER_TLS_CA")
    assert receiver["SLUICE_RECEIVER_AUTH_TOKEN_FILE"] == tracker["SLUICE_TRACKER_RECEIVER_TOKEN_FILE"]
    assert driver["SLUICE_DRIVER_AUTH_TOKEN_FILE"] == tracker["SLUICE_TRACKER_DRIVER_TOKEN_FILE"]
    assert (
        tracker["SLUICE_TRACKER_BLOCK_STORE"]
        == driver["SLUICE_DRIVER_BLOCK_STORE"]
        == receiver["SLUICE_RECEIVER_BLOCK_STORE"]
    )
