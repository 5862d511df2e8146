"""A real Prometheus scrapes a running tracker, receiver and driver; every promised metric has series.

The services run as the real console scripts on free loopback ports (the receiver with the
generator source, the driver with the demo's word count); Prometheus runs from the Debian package
with a generated config and a temporary storage directory. The test polls Prometheus's HTTP API
with a deadline until each metric the tracker, receiver and driver issues name has a series, then
until the records counters have grown.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice.embedded import driver_argv, free_port, receiver_argv, stop_process, tracker_argv, wait_for_port
from tests.deploy.conftest import need_tool
from tests.deploy.metric_names import REQUIRED, sample_names

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

BIN = Path(sys.executable).parent


def _script(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is not installed in {BIN} (`make install`)"
    return str(path)


def _query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def _poll(
    what: str,
    check: Callable[[], bool],
    deadline: float,
    procs: dict[str, subprocess.Popen],
    logs: Path,
    detail: Callable[[], str] = lambda: "",
) -> None:
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                pytest.fail(
                    f"{name} exited with {proc.returncode} while waiting for {what}:\n"
                    + (logs / f"{name}.log").read_text()[-3000:]
                )
        try:
            if check():
                return
        except OSError:
            pass  # Prometheus not answering yet
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}{detail()}")


def _series_names() -> list[str]:
    """One series name per promised metric (histograms by their _count, counters by _total)."""
    names = []
    for service in ("tracker", "receiver", "driver", "estimator"):  # the estimator's gauges: driver issue
        for family, kind in REQUIRED[service].items():
            names.append(family + {"histogram": "_count", "counter": "_total"}.get(kind, ""))
    return names


def test_prometheus_scrapes_every_service(tmp_path: Path) -> None:
    prometheus = need_tool("prometheus", "Debian package prometheus")
    tracker_bin, receiver_bin, driver_bin = (_script(n) for n in ("sluice-tracker", "sluice-receiver", "sluice-driver"))
    logs = tmp_path / "logs"
    logs.mkdir()
    rpc, m_tracker, m_receiver, m_driver, m_prom = (free_port() for _ in range(5))
    tracker = f"127.0.0.1:{rpc}"
    store = (tmp_path / "blocks").as_uri()  # where the receiver writes, the tracker and driver take blocks
    procs: dict[str, subprocess.Popen] = {}
    try:
        procs["tracker"] = subprocess.Popen(
            tracker_argv(
                tracker,
                tmp_path / "wal",
                block_store=store,
                extra=["--metrics-port", str(m_tracker)],
                program=[tracker_bin],
            ),
            stdout=open(logs / "tracker.log", "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for_port(rpc, proc=procs["tracker"])
        procs["receiver"] = subprocess.Popen(
            receiver_argv(
                tracker,
                source="generator",
                block_store=store,
                extra=["--generator-rate", "2000", "--metrics-port", str(m_receiver)],
                program=[receiver_bin],
            ),
            stdout=open(logs / "receiver.log", "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        procs["driver"] = subprocess.Popen(
            driver_argv(
                tracker,
                app="sluice.demo.app:word_count",
                master="local[1]",
                batch_interval_ms=1000,
                block_store=store,
                extra=["--initial-rate", "1000", "--metrics-port", str(m_driver)],
                program=[driver_bin],
            ),
            stdout=open(logs / "driver.log", "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=tmp_path,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: [{json.dumps(str(Path(__file__).resolve().parents[2] / 'deploy/prometheus/alerts.yml'))}]\n"
            "scrape_configs:\n"
            f"  - job_name: sluice-tracker\n    static_configs: [{{targets: ['127.0.0.1:{m_tracker}']}}]\n"
            f"  - job_name: sluice-receiver\n    static_configs: [{{targets: ['127.0.0.1:{m_receiver}']}}]\n"
            f"  - job_name: sluice-driver\n    static_configs: [{{targets: ['127.0.0.1:{m_driver}']}}]\n"
        )
        procs["prometheus"] = subprocess.Popen(
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{m_prom}",
            ],
            stdout=open(logs / "prometheus.log", "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        base = f"http://127.0.0.1:{m_prom}"
        deadline = time.monotonic() + 240
        _poll("every target up", lambda: len([r for r in _query(base, "up == 1")]) == 3, deadline, procs, logs)

        missing = _series_names()

        def all_present() -> bool:
            missing[:] = [name for name in missing if not _query(base, name)]
            return not missing

        _poll(
            "a series for every metric",
            all_present,
            deadline,
            procs,
            logs,
            detail=lambda: f": none for {missing}; driver log:\n" + (logs / "driver.log").read_text()[-3000:],
        )

        first = {
            q: float(_query(base, q)[0]["value"][1])
            for q in (
                "sum(sluice_receiver_records_total)",
                "sum(sluice_batches_completed_total)",
                "sum(sluice_tracker_requests_total)",
            )
        }
        _poll(
            "the records counters to grow",
            lambda: all(float(_query(base, q)[0]["value"][1]) > v for q, v in first.items()),
            deadline,
            procs,
            logs,
        )
        # The recording rule from deploy/prometheus/alerts.yml evaluates on the real series too.
        rule = "sluice:batch_scheduling_delay_seconds:mean1m"
        _poll("the scheduling-delay recording rule", lambda: bool(_query(base, rule)), deadline, procs, logs)
    finally:
        for name in ("prometheus", "driver", "receiver", "tracker"):
            if name in procs:
                stop_process(procs[name])


def test_required_names_cover_the_deploy_rules() -> None:
    """The names this test asks Prometheus for include everything the alert rules read."""
    rules = (Path(__file__).resolve().parents[2] / "deploy/prometheus/alerts.yml").read_text()
    promised = set().union(*(sample_names(f) for f in REQUIRED.values()))
    import re

    used = set(re.findall(r"\bsluice_[a-z0-9_]+", rules))
    assert used <= promised, sorted(used - promised)
