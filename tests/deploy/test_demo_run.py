"""``sluice-demo --seconds 20`` end to end: exits 0, no record lost, a chart, no process left behind,
a free port in place of a taken default, the load steps in the table and the controller in words;
and SIGTERM in the middle stops everything it started."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path

import pytest

from sluice.demo.pipeline import TRACKER_PORT
from sluice.embedded import free_port
from tests.polling import wait_until

# One xdist worker runs both: the demo takes its documented ports (7100, 9100, ...) when they are
# free, and one run's ports in use would make the other fall back and say so.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.kafka,
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("demo-ports"),
    pytest.mark.alone(
        "measures a Spark pipeline's throughput or latency on two cores: other workers beside it would be measured too"
    ),
]

DEMO = Path(sys.executable).parent / "sluice-demo"


def _marked(mark: str) -> list[int]:
    """Processes whose environment carries ``mark``: everything the demo started inherits it
    (broker, tracker, receivers, load generator, the Spark JVM and its Python workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _wait_gone(mark: str) -> None:
    wait_until(lambda: not _marked(mark), "every process the demo started gone", 15)


def _start(tmp_path: Path, seconds: int, ui_port: int | None = None) -> tuple[subprocess.Popen, str, Path]:
    """The demo as a new user runs it: no ``--output``, so it writes ``./sluice-demo-out`` relative
    to its working directory (a relative path that becomes block-store URLs and log paths)."""
    assert DEMO.exists(), f"make test installs the sluice-demo console script, but {DEMO} is missing"
    mark = f"SLUICE_DEMO_TEST_{uuid.uuid4().hex}"
    out = tmp_path / "sluice-demo-out"
    proc = subprocess.Popen(
        [str(DEMO), "--seconds", str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={**os.environ, mark: "1", **({} if ui_port is None else {"SLUICE_DRIVER_UI_PORT": str(ui_port)})},
        start_new_session=True,
    )
    return proc, mark, out


def test_demo_runs_loses_nothing_and_cleans_up(tmp_path: Path) -> None:
    """The literal command, with the default tracker port taken (as by another demo on the host)."""
    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", TRACKER_PORT))
            holder.listen()
        except OSError:
            pass  # something else holds it: taken either way
        proc, mark, out = _start(tmp_path, 20)
        try:
            stdout, _ = proc.communicate(timeout=540)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    # what the demo says holds however loaded the machine is: checked before the outcome
    replaced = re.search(
        rf"^sluice-demo: port {TRACKER_PORT} \(tracker RPC\) is in use; using (\d+) instead$", stdout, re.M
    )
    assert replaced, stdout[:3000]
    assert f", tracker 127.0.0.1:{replaced[1]}, " in stdout
    assert "sluice-demo: metrics tracker http://127.0.0.1:" in stdout
    assert " t (s)    batch  records   offered  rate limit  proc ms  sched ms  top words" in stdout
    assert "---- 6.0 s: the offered load steps up, 500/s -> 3,000/s ----" in stdout
    assert "---- 12.0 s: the offered load steps down, 3,000/s -> 500/s ----" in stdout
    assert re.search(r"^  controller +\w+ the rate limit ", stdout, re.M), stdout[-2000:]
    assert re.search(r"^  capacity +the driver's processing time says it could do about [\d,]+/s; ", stdout, re.M), (
        stdout[-2000:]
    )
    assert proc.returncode == 0, stdout[-4000:]
    assert "none lost" in stdout, stdout[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["none_lost"] and summary["records_in"] > 0
    assert summary["records_processed"] == summary["records_in"] == summary["distinct"]
    chart = out / "sluice-demo.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000
    _wait_gone(mark)


def test_sigterm_stops_everything_it_started(tmp_path: Path) -> None:
    """... and the streaming page, moved by ``SLUICE_DRIVER_UI_PORT``, shows the batches meanwhile."""
    ui_port = free_port()
    proc, mark, _ = _start(tmp_path, 120, ui_port)
    lines: list[str] = []
    table_started = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "top words" in line:
                table_started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert table_started.wait(240), "".join(lines)[-4000:]
        assert len(_marked(mark)) >= 5  # broker, tracker, 2 receivers, load (+ the JVM)
        assert f"sluice-demo: streaming page http://127.0.0.1:{ui_port}/\n" in lines
        stats_url = f"http://127.0.0.1:{ui_port}/api/v1/streaming/statistics"
        with urllib.request.urlopen(stats_url, timeout=10) as response:
            stats = json.load(response)
        assert stats["numTotalCompletedBatches"] >= 1 and stats["numActiveReceivers"] == 2, stats
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 128 + signal.SIGTERM, "".join(lines)[-4000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    _wait_gone(mark)
