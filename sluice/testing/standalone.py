"""A real Spark standalone cluster from the pyspark package on 127.0.0.1: a master and one-core
workers started with pyspark's own ``bin/spark-class``, as an operator would start them.

The cluster tests run drivers against it, and ``bench/peers_scale.py`` measures Sluice's paths on one
worker and on two.  ``marker`` is in the environment of every process the cluster spawns (workers,
executors, Python workers), so what a caller failed to stop can be found.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from sluice.embedded.processes import free_port, start_process, stop_process, wait_for_port, wait_until

__all__ = ["DRIVER_DEFAULTS", "SPARK_HOME", "StandaloneCluster", "cluster_jvm", "start_standalone"]

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

# Spark settings of the drivers (spark-defaults.conf in their SPARK_CONF_DIR).
DRIVER_DEFAULTS = {
    "spark.executor.memory": "512m",
    "spark.driver.memory": "512m",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def cluster_jvm() -> tuple[dict[str, str], dict[str, str]]:
    """The environment of a cluster's daemons and the Spark settings of its executors that start
    them as the drivers start: every JVM of a run alike.  The drivers' options are
    ``SPARK_SUBMIT_OPTS``, which only spark-submit's JVM reads; ``make test`` sets there the C1
    compiler and the serial collector (the parallel tiers) and Spark's class-data archive (every
    tier).  A master, two workers and their executors are most of a cluster test's CPU, and most
    of them live seconds, which is what those options are for.  A ``SPARK_DAEMON_JAVA_OPTS`` of
    the caller's is kept."""
    jvm = os.environ.get("SPARK_SUBMIT_OPTS")
    if not jvm:
        return {}, {}
    return {"SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_DAEMON_JAVA_OPTS", jvm)}, {
        "spark.executor.extraJavaOptions": jvm
    }


@dataclass
class StandaloneCluster:
    """The master's URL and the worker processes (``size`` workers of one core and ``worker_memory``
    each; a stopped worker's slot is ``None``)."""

    directory: Path
    master_port: int
    webui_port: int
    marker: str
    size: int = 2
    worker_memory: str = "1g"
    master: subprocess.Popen | None = None
    workers: list[subprocess.Popen | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workers = self.workers or [None] * self.size

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def conf_dir(self) -> Path:
        return self.directory / "conf"

    @property
    def pids(self) -> list[int]:
        """The live master's and workers' pids: executors and their Python workers are their children."""
        return [p.pid for p in (self.master, *self.workers) if p is not None and p.poll() is None]

    def driver_env(self, **extra: str) -> dict[str, str]:
        """A driver's environment (over the caller's): the cluster's Spark settings, the marker, ``extra``."""
        return {
            "SPARK_CONF_DIR": str(self.conf_dir),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SLUICE_TEST_CLUSTER": self.marker,
            **extra,
        }

    def _daemon(self, args: list[str], log: Path, **env: str) -> subprocess.Popen:
        """``spark-class args`` without any AWS variable: executors get a store's endpoint and
        credentials from the driver, not from their hosts."""
        unset = [arg for name in os.environ if name.startswith("AWS_") for arg in ("-u", name)]
        return start_process(
            ["env", *unset, str(SPARK_CLASS), *args],
            log=log,
            env={
                **cluster_jvm()[0],
                "SPARK_HOME": str(SPARK_HOME),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": "256m",
                "SLUICE_TEST_CLUSTER": self.marker,
                **env,
            },
        )

    def start(self) -> StandaloneCluster:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        defaults = {**DRIVER_DEFAULTS, **cluster_jvm()[1]}
        (self.conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in defaults.items()))
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
        for index in range(self.size):
            self.start_worker(index)
        self.wait_for_workers(self.size)
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
                self.worker_memory,
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

    def wait_for_workers(self, count: int, *, exactly: bool = False) -> None:
        wait_until(
            lambda: self.alive_workers() == count if exactly else self.alive_workers() >= count,
            f"{count} live workers",
            180,
            [p for p in (self.master, *self.workers) if p is not None],
        )

    def resize(self, count: int) -> None:
        """Run exactly the first ``count`` workers: start the missing ones, stop the others, and wait
        until the master counts ``count`` alive (a stopped worker's disconnection removes it at once)."""
        for index, proc in enumerate(self.workers):
            if index < count and proc is None:
                self.start_worker(index)
            elif index >= count and proc is not None:
                stop_process(proc)
                self.workers[index] = None
        self.wait_for_workers(count, exactly=True)

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


def start_standalone(directory: Path, workers: int = 2, worker_memory: str = "1g") -> StandaloneCluster:
    """A started cluster on free ports with a fresh marker; stopped again if it cannot start."""
    cluster = StandaloneCluster(
        directory, free_port(), free_port(), f"sluice-cluster-{uuid.uuid4().hex[:12]}", workers, worker_memory
    )
    try:
        return cluster.start()
    except BaseException:
        cluster.stop()
        raise
