"""Each running service exports only its own metric families: a receiver that loads the tracker's
client, or a driver that loads every estimator plugin, must not export their families at zero
(a dashboard summing a family over all jobs would count phantom series)."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.embedded import (
    driver_argv,
    free_port,
    receiver_argv,
    start_service,
    start_tracker,
    stop_process,
    wait_until,
)
from tests.deploy.metric_names import REQUIRED, served

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _families(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    names = {f.name for f in text_string_to_metric_families(text) if f.name.startswith("sluice_")}
    # the text format's parser reads a counter's or histogram's _created series as a family of its own
    return {n for n in names if not (n.endswith("_created") and n.removesuffix("_created") in names)}


def _promised(service: str) -> set[str]:
    return set(REQUIRED[service]) | (set(REQUIRED["estimator"]) if service == "driver" else set())


def _scrape(service: str, port: int, proc) -> set[str]:
    """The service's sluice_* families once every promised one has a series (labelled families
    appear with their first sample)."""
    found: dict[str, set[str]] = {}

    def complete() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{service} exited with {proc.returncode}")
        try:
            found["families"] = _families(port)
        except OSError:
            return False
        return _promised(service) <= found["families"]

    wait_until(complete, f"every promised family on {service}'s /metrics", 180)
    return found["families"]


def test_each_service_serves_its_own_families_only(tmp_path: Path) -> None:
    m_tracker, m_receiver, m_driver = free_port(), free_port(), free_port()
    store = (tmp_path / "blocks").as_uri()
    tracker = start_tracker(tmp_path / "wal", args=["--no-fsync", "--metrics-port", str(m_tracker)], block_store=store)
    procs = []
    try:
        procs.append(
            start_service(
                receiver_argv(
                    tracker.address,
                    source="generator",
                    block_store=store,
                    extra=["--generator-rate", "500", "--metrics-port", str(m_receiver)],
                ),
                port=m_receiver,
                log=tmp_path / "receiver.log",
                name="sluice-receiver",
            )
        )
        procs.append(
            start_service(
                driver_argv(
                    tracker.address,
                    app="sluice.demo.app:word_count",
                    master="local[1]",
                    block_store=store,
                    extra=["--initial-rate", "500", "--metrics-port", str(m_driver)],
                ),
                log=tmp_path / "driver.log",
                env={"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
            )
        )
        scraped = {
            "driver": _scrape("driver", m_driver, procs[1]),  # last to have samples: batches must complete
            "tracker": _scrape("tracker", m_tracker, tracker.proc),
            "receiver": _scrape("receiver", m_receiver, procs[0]),
        }
        for service, families in scraped.items():
            foreign = families - served(service).keys()
            assert not foreign, f"{service} exports families that are not its own: {sorted(foreign)}"
    finally:
        for proc in reversed(procs):
            stop_process(proc)
        tracker.stop()
