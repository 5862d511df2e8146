"""The driver on a real Spark standalone cluster, blocks in S3 (moto's server).

Executors run in their own JVMs and Python workers on two workers whose environment has no AWS
variable: they read the blocks with the endpoint and credentials the driver ships with each block
RDD.  Every record must come out once across a worker killed mid-batch (Spark runs the lost task on
the other worker), a driver killed with SIGKILL mid-batch (the restarted driver re-runs the batch),
and once more under ``spark-submit`` with the Python environment shipped as a venv-pack archive.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from importlib.metadata import distributions, requires
from pathlib import Path

import pytest

from sluice.embedded import driver_argv, receiver_argv, start_process, start_service, stop_process, wait_until
from sluice.testing import MotoServer
from sluice.tracker.client.tracker_client import TrackerClient
from tests.cluster.apps import marked_records
from tests.cluster.conftest import SPARK_SUBMIT, StandaloneCluster
from tests.driver.conftest import driver_tracker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.alone(
        "measures a Spark pipeline's throughput or latency on two cores: other workers beside it would be measured too"
    ),
]

REPO = Path(__file__).resolve().parents[2]
APP = "tests.cluster.apps:write_values"


def start_receiver(
    tmp_path: Path, cluster: StandaloneCluster, s3: MotoServer, tracker: str, bucket: str, total: int, rate: int
) -> subprocess.Popen:
    return start_service(
        receiver_argv(
            tracker,
            source="generator",
            block_store=f"s3://{bucket}/blocks",
            receiver_id="g",
            extra=["--generator-total", str(total), "--max-rate", str(rate)],
        ),
        env={**s3.env, "SLUICE_TEST_CLUSTER": cluster.marker},
        log=tmp_path / "receiver.log",
    )


def start_driver(
    cluster: StandaloneCluster, s3: MotoServer, tracker: str, bucket: str, tmp_path: Path, log: Path, *command: str
) -> subprocess.Popen:
    """The driver (``command``: sluice-driver or spark-submit) with the app importable from this checkout."""
    env = cluster.driver_env(
        SLUICE_TEST_OUT=str(tmp_path / "out"),
        SLUICE_TEST_CONTROL=str(tmp_path / "control"),
        PYTHONPATH=str(REPO),
        **s3.env,
    )
    return start_process(
        driver_argv(
            tracker,
            app=APP,
            batch_interval_ms=1000,
            block_store=f"s3://{bucket}/blocks",
            extra=["--initial-rate", "1000"],
            program=command,
        ),
        log=log,
        env=env,
    )


def sluice_driver(cluster: StandaloneCluster) -> list[str]:
    return [sys.executable, *driver_argv(master=cluster.url)]


def output_rows(out: Path) -> list[dict]:
    parts = sorted(out.glob("batch_time=*/part-*"))
    return [json.loads(line) for part in parts for line in part.read_text().splitlines()]


def assert_exactly_once(rows: list[dict], total: int) -> None:
    values = [row["value"] for row in rows]
    assert len(values) == total, f"{len(values)} rows, {len(set(values))} distinct, {total} expected"
    assert set(values) == {f"g-0:{n}" for n in range(total)}


def kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_exactly_once_across_a_worker_killed_mid_batch_and_a_driver_sigkill(
    cluster: StandaloneCluster, s3: MotoServer, tmp_path: Path
) -> None:
    total, bucket = 8000, s3.bucket()
    control, log = tmp_path / "control", tmp_path / "driver.log"
    control.mkdir()
    (control / "gate-tasks").touch()  # the first tasks wait there until a worker is killed
    tracker = driver_tracker(tmp_path, block_store=f"s3://{bucket}/blocks")
    first = start_driver(cluster, s3, tracker.address, bucket, tmp_path, log, *sluice_driver(cluster))
    receiver = second = None
    try:
        wait_until(lambda: "streaming driver started" in log.read_text(), "the driver to start", 240, [first], log)
        receiver = start_receiver(tmp_path, cluster, s3, tracker.address, bucket, total, 800)
        wait_until(lambda: list(control.glob("task-w*")), "a task at the gate", 120, [first, receiver], log)
        worker = int(next(control.glob("task-w*")).name.split("-")[1][1:])
        cluster.kill_worker(worker)  # its executor and Python workers go with it, the task half done
        (control / "gate-tasks").unlink()
        cluster.start_worker(worker)
        wait_until(lambda: marked_records(control) > 0, "the batch of the lost task", 120, [first, receiver], log)
        (control / "hold-driver").touch()
        wait_until(lambda: list(control.glob("held-*")), "a batch written and held", 120, [first, receiver], log)
        kill_group(first)  # output written, completion never reported
        (control / "hold-driver").unlink()
        second = start_driver(cluster, s3, tracker.address, bucket, tmp_path, log, *sluice_driver(cluster))
        wait_until(lambda: marked_records(control) >= total, f"{total} records", 240, [second, receiver], log)
        assert stop_process(second, timeout=120) == 0
    finally:
        for proc in (first, second):
            if proc is not None:
                kill_group(proc)
        if receiver is not None:
            stop_process(receiver)
        tracker.stop()
    text = log.read_text()
    # Spark lost the executor of the task held at the gate (its task ran again on the other one), and
    # the second driver ran the held batch again.
    assert "Lost executor" in text and "re-running" in text
    rows = output_rows(tmp_path / "out")
    assert_exactly_once(rows, total)
    assert {row["worker"] for row in rows} == {"w0", "w1"}  # executors on both workers read from S3


def packed_environment(tmp_path: Path) -> Path:
    """A fresh venv with Sluice (not editable) and what executors import, packed with venv-pack.

    Pyspark is left out: executors take it from the Spark installation.  Versions are pinned to the
    test environment's, so pip finds them in its cache."""
    source = tmp_path / "src"  # a copy: building in the checkout would leave build/ there
    shutil.copytree(REPO / "sluice", source / "sluice", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "-q"]
    subprocess.run([*pip, "--no-deps", str(source)], check=True)
    wanted = [
        r.split(";")[0]
        for r in requires("sluice-streaming") or []
        if not r.startswith("pyspark") and ("extra ==" not in r or 'extra == "s3"' in r)
    ]
    pins = tmp_path / "constraints.txt"
    pins.write_text(
        "".join(
            f"{d.metadata['Name']}=={d.version}\n"
            for d in distributions()
            if d.metadata["Name"] not in ("sluice-streaming", "pyspark")
        )
    )
    subprocess.run([*pip, "-c", str(pins), *wanted], check=True)
    archive = tmp_path / "sluice-env.tar.gz"
    subprocess.run(
        [str(Path(sys.executable).parent / "venv-pack"), "-p", str(env), "-o", str(archive), "-q"], check=True
    )
    return archive


def test_spark_submit_with_the_python_environment_shipped_by_venv_pack(
    cluster: StandaloneCluster, s3: MotoServer, tmp_path: Path
) -> None:
    total, bucket = 3000, s3.bucket()
    (tmp_path / "control").mkdir()
    archive = packed_environment(tmp_path)
    entry = subprocess.run(
        [sys.executable, "-m", "sluice.spark_driver.submit", "--path"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert entry == str(REPO / "sluice" / "spark_driver" / "submit.py")
    tracker = driver_tracker(tmp_path, block_store=f"s3://{bucket}/blocks")
    receiver = start_receiver(tmp_path, cluster, s3, tracker.address, bucket, total, 3000)
    log = tmp_path / "driver.log"
    driver = None
    try:
        wait_until(lambda: asyncio.run(_accepted(tracker.address)) >= total, "every record stored", 60, [receiver])
        driver = start_driver(
            cluster,
            s3,
            tracker.address,
            bucket,
            tmp_path,
            log,
            str(SPARK_SUBMIT),
            "--master",
            cluster.url,
            "--archives",
            f"{archive}#environment",
            "--conf",
            "spark.pyspark.python=./environment/bin/python",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
            entry,
            "--trigger",
            "available-now",
        )
        assert driver.wait(300) == 0, log.read_text()[-3000:]
    finally:
        if driver is not None:
            kill_group(driver)
        stop_process(receiver)
        tracker.stop()
    rows = output_rows(tmp_path / "out")
    assert_exactly_once(rows, total)
    assert {row["worker"] for row in rows} <= {"w0", "w1"}
    # Every task imported Sluice from the unpacked archive, not from this checkout.
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert {Path(row["sluice"]).parts[-6:] for row in rows} == {
        ("environment", "lib", python, "site-packages", "sluice", "__init__.py")
    }


async def _accepted(address: str) -> int:
    async with TrackerClient(address, "admin") as admin:
        status = await admin.status()
    return sum(s["unallocated_records"] for s in status["streams"].values())
