"""The compose file: ``docker compose config`` where the plugin exists, and its local references."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.deploy.conftest import DEPLOY

COMPOSE = DEPLOY / "compose.yaml"


def test_docker_compose_config() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no Docker on this machine, so `docker compose config` cannot check compose.yaml")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(
            "no Docker compose plugin on this machine (Docker's own packages, not Debian's): "
            "`docker compose version` fails"
        )
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_compose_runs_every_part() -> None:
    text = COMPOSE.read_text()
    for service in ("broker", "tracker", "receiver-1", "receiver-2", "driver", "prometheus", "grafana"):
        assert re.search(rf"^  {re.escape(service)}:", text, re.M), f"no service {service}"


def test_compose_mounts_and_builds_files_that_exist() -> None:
    text = COMPOSE.read_text()
    for local in re.findall(r"- (\./[^:\s]+):", text):
        assert (DEPLOY / local).exists(), f"compose.yaml mounts {local}, which does not exist"
    dockerfile = re.search(r"dockerfile: (\S+)", text)[1]
    assert (DEPLOY.parent / dockerfile).exists()


def test_compose_scrape_targets_match_the_services_ports() -> None:
    scrape = (DEPLOY / "prometheus" / "prometheus-compose.yml").read_text()
    text = COMPOSE.read_text()
    for port_key, target in (
        ("SLUICE_TRACKER_METRICS_PORT", "tracker:{}"),
        ("SLUICE_RECEIVER_METRICS_PORT", "receiver-1:{}"),
        ("SLUICE_DRIVER_METRICS_PORT", "driver:{}"),
    ):
        port = re.search(rf'{port_key}: "(\d+)"', text)[1]
        assert target.format(port) in scrape


def test_compose_gives_the_tracker_the_receivers_and_the_driver_one_block_store() -> None:
    text = COMPOSE.read_text()
    stores = {
        service: re.search(rf"SLUICE_{service}_BLOCK_STORE: (\S+)", text)[1]
        for service in ("RECEIVER", "TRACKER", "DRIVER")
    }
    assert len(set(stores.values())) == 1, stores
