"""A real Spark standalone cluster from the pyspark package: one master and two one-core workers on
127.0.0.1, started once for the module that uses it and stopped with every process it spawned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
import pytest

from sluice.testing import free_port, start_process, stop_process, wait_for_port, wait_until
from tests.observe import leftover_processes

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
WORKERS = 2

# Spark settings of the test drivers (spark-defaults.conf in their SPARK_CONF_DIR).
DRIVER_DEFAULTS = {
    "spark.executor.memory": "512m",
    "spark.driver.memory": "512m",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


@dataclass
class StandaloneCluster:
    """The master's URL and the worker processes; ``marker`` is in the environment of every process the
    cluster spawns (workers, executors, Python workers) and of the test's drivers."""

    directory: Path
    master_port: int
    webui_port: int
    marker: str
    master: subprocess.Popen | None = None
    workers: list[subprocess.Popen | None] = field(default_factory=lambda: [None] * WORKERS)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def conf_dir(self) -> Path:
        return self.directory / "conf"

    def driver_env(self, **extra: str) -> dict[str, str]:
        """A driver's environment (over the test's): the cluster's Spark settings, the marker, ``extra``."""
        return {
            "SPARK_CONF_DIR": str(self.conf_dir),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SLUICE_TEST_CLUSTER": self.marker,
            **extra,
        }

    def _daemon(self, args: list[str], log: Path, **env: str) -> subprocess.Popen:
        """``spark-class args`` without any AWS variable: executors get the store's endpoint and
        credentials from the driver, not from their hosts."""
        unset = [arg for name in os.environ if name.startswith("AWS_") for arg in ("-u", name)]
        return start_process(
            ["env", *unset, str(SPARK_CLASS), *args],
            log=log,
            env={
                "SPARK_HOME": str(SPARK_HOME),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": "256m",
                "SLUICE_TEST_CLUSTER": self.marker,
                **env,
            },
        )

    def start(self) -> StandaloneCluster:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in DRIVER_DEFAULTS.items()))
        self.master = self._daemon(
            [
                MASTER_CLASS,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.webui_port),
            ],
            self.directory / "master.log",
        )
        wait_for_port(self.master_port, self.master, name="the Spark master", timeout=120)
        for index in range(WORKERS):
            self.start_worker(index)
        self.wait_for_workers(WORKERS)
        return self

    def start_worker(self, index: int) -> None:
        work = self.directory / f"worker-{index}"
        work.mkdir(exist_ok=True)
        self.workers[index] = self._daemon(
            [
                WORKER_CLASS,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                "0",
                "--work-dir",
                str(work),
                self.url,
            ],
            self.directory / f"worker-{index}.log",
            SLUICE_TEST_WORKER=f"w{index}",
        )

    def alive_workers(self) -> int:
        """Workers the master counts alive (0 while its web UI, which opens after its port, is not up or
        not yet serving its JSON: it answers with an empty or HTML body while it starts)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=10) as response:
                state = json.load(response)
        except (OSError, ValueError):  # ValueError: json's JSONDecodeError
            return 0
        return sum(1 for worker in state["workers"] if worker["state"] == "ALIVE")

    def wait_for_workers(self, count: int) -> None:
        wait_until(
            lambda: self.alive_workers() >= count,
            f"{count} live workers",
            180,
            [p for p in (self.master, *self.workers) if p is not None],
        )

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker with its executor and Python workers (its process group)."""
        proc = self.workers[index]
        assert proc is not None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        """Workers, then the master; each one's group goes with it (a worker's executors and Python workers)."""
        for proc in (*self.workers, self.master):
            if proc is not None:
                stop_process(proc)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(
        tmp_path_factory.mktemp("spark-cluster"), free_port(), free_port(), f"sluice-cluster-{uuid.uuid4().hex[:12]}"
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
    wait_until(lambda: not leftover_processes(cluster.marker), "every process of the cluster gone", 20)
