"""The fault campaign's deployment: every service of a Sluice pipeline on a host of its own.

Hosts (one network namespace each, :mod:`sluice.testing.netns`): ``store`` (moto's S3: blocks,
tansu's storage, the trackers' shared log), ``broker`` (tansu on that S3, so a restart keeps the
topic), ``tracker`` and, where Sluice has standbys, ``tracker2`` (its standby), ``recv1``
and ``recv2`` (a Kafka receiver each), ``master``, ``worker1`` and ``worker2`` (Spark standalone),
``driver`` (``sluice-driver`` running :func:`sluice.testing.chaos_workload.write_records`) and
``client`` (the producer, the checker's reads).

Every service runs as under a process supervisor (systemd's ``Restart=always``): :meth:`supervise`
starts again whatever exited, unless a fault holds it down.  A lone tracker keeps its working
directory (its write-ahead log) across kills; other services may lose theirs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sluice.embedded.processes import (
    DRIVER_MODULE,
    RECEIVER_MODULE,
    TRACKER_MODULE,
    ProcessError,
    driver_argv,
    receiver_argv,
    start_process,
    tracker_argv,
)
from sluice.embedded.tansu import tansu_binary
from sluice.testing.netns import Topology
from sluice.testing.standalone import SPARK_HOME, cluster_jvm

__all__ = ["HOSTS", "ChaosCluster", "Service", "standby_supported"]

# tansu on S3 shows a batch before an earlier one whose write its store held up (seconds, under the
# store's faults): the receivers fetch such a gap again for this long before taking it as missing
TANSU_GAPS = {"SLUICE_KAFKA_GAP_WAIT_MS": "60000"}
HOSTS = ("store", "broker", "tracker", "tracker2", "recv1", "recv2", "master", "worker1", "worker2", "driver", "client")
PY = sys.executable


def standby_supported() -> bool:
    """Whether this Sluice has tracker standbys (``sluice-tracker --standby`` on a shared log)."""
    return importlib.util.find_spec("sluice.tracker.server.standby") is not None


@dataclass
class Service:
    """One supervised process: ``command`` builds its arguments (addresses are known only once the
    topology is up); ``held`` counts the faults keeping it down."""

    name: str
    host: str
    port: int | None
    command: Callable[[], list[str]]
    env: dict[str, str] = field(default_factory=dict)
    keep_dir: bool = False  # its working directory is state that must survive (the tracker's log)
    proc: subprocess.Popen | None = None
    held: int = 0
    starts: int = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class ChaosCluster:
    """The topology, the services and their working directories under ``directory``."""

    directory: Path
    partitions: int = 4
    group: str = "chaos"  # the receivers' consumer group
    batch_interval_ms: int = 10_000  # a batch job takes seconds on a loaded machine: shorter ones pile up
    remember_ms: int = 10_000
    topic: str = "ids"
    standby: bool = field(default_factory=lambda: standby_supported())
    net: Topology = field(default_factory=lambda: Topology(HOSTS))
    services: dict[str, Service] = field(default_factory=dict)

    def ip(self, host: str) -> str:
        return self.net.hosts[host]

    @property
    def trackers(self) -> list[str]:
        """The tracker hosts: a leader and its standby where Sluice has standbys, else one."""
        return ["tracker", "tracker2"] if self.standby else ["tracker"]

    @property
    def tracker(self) -> str:
        """What receivers and the driver are told: every tracker's address."""
        return ",".join(f"{self.ip(host)}:7100" for host in self.trackers)

    @property
    def bootstrap(self) -> str:
        return f"{self.ip('broker')}:9092"

    @property
    def output(self) -> Path:
        return self.directory / "out"

    @property
    def aws(self) -> dict[str, str]:
        endpoint = f"http://{self.ip('store')}:5000"
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ENDPOINT": endpoint,  # tansu's object_store
            "AWS_ALLOW_HTTP": "true",
        }

    def workdir(self, name: str) -> Path:
        return self.directory / "hosts" / name

    def log(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    def client(self, *args: str, timeout: float = 120) -> str:
        """``python -m sluice.testing.chaos_workload args`` on the client host; its output."""
        cmd = self.net.command("client", [PY, "-m", "sluice.testing.chaos_workload", *args])
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.aws})
        if result.returncode != 0:
            raise ProcessError(f"chaos_workload {args[0]} failed: {result.stderr.strip()[-2000:]}")
        return result.stdout

    def reachable(self, host: str, port: int) -> bool:
        """Whether ``host:port`` accepts a connection from the client host."""
        probe = f"</dev/tcp/{self.ip(host)}/{port}"
        cmd = self.net.command("client", ["timeout", "2", "bash", "-c", probe])
        return subprocess.run(cmd, capture_output=True).returncode == 0

    def up(self) -> ChaosCluster:
        """Build the network, start every service and wait until the pipeline is ready to take records."""
        (self.directory / "logs").mkdir(parents=True, exist_ok=True)
        self.output.mkdir(parents=True, exist_ok=True)
        self.net.up()
        self._define()
        for name in ("store",):
            self._start_ready(name)
        self.client("buckets", "blocks", "tansu", "trackerlog")
        for name in ("broker", *self.trackers, "master"):
            self._start_ready(name)
        topic = ["--bootstrap", self.bootstrap, "--topic", self.topic, "--partitions", str(self.partitions)]
        self.client("topic", *topic, "--out", os.devnull)
        for name in ("worker1", "worker2", "recv1", "recv2", "driver"):
            self.start(name)
        self._wait(lambda: "streaming driver started" in self._text("driver"), "the driver to start", 300)
        return self

    def down(self) -> None:
        """Kill every process and remove the network (the processes of every namespace go with it)."""
        for service in self.services.values():
            if service.alive and service.proc is not None:
                _kill_group(service.proc, signal.SIGCONT)
        self.net.down()
        for service in self.services.values():
            if service.proc is not None:
                try:
                    service.proc.wait(10)
                except subprocess.TimeoutExpired:
                    _kill_group(service.proc, signal.SIGKILL)

    def start(self, name: str) -> None:
        service = self.services[name]
        self.workdir(name).mkdir(parents=True, exist_ok=True)
        env = {**self.aws, **service.env}
        with self.log(name).open("a") as log:
            log.write(f"--- start {service.starts + 1} at {time.time():.3f}\n")
        service.proc = start_process(
            ["env", "-C", str(self.workdir(name)), *self.net.command(service.host, service.command())],
            log=self.log(name),
            env=env,
        )
        service.starts += 1

    def kill(self, name: str, wipe: bool) -> None:
        """SIGKILL the service's process group (a crashed host keeps no process); ``wipe`` also deletes
        its working directory unless that is state the deployment keeps on a durable disk."""
        service = self.services[name]
        if service.proc is not None:
            _kill_group(service.proc, signal.SIGKILL)
            service.proc.wait(10)
        if wipe and not service.keep_dir:
            shutil.rmtree(self.workdir(name), ignore_errors=True)

    def signal(self, name: str, sig: int) -> None:
        service = self.services[name]
        if service.alive and service.proc is not None:
            _kill_group(service.proc, sig)

    def supervise(self) -> list[str]:
        """Start again every service that exited and no fault holds down; the names restarted."""
        restarted = []
        for name, service in self.services.items():
            if service.held == 0 and not service.alive:
                self.start(name)
                restarted.append(name)
        return restarted

    def _define(self) -> None:
        ip, aws = self.ip, self.aws
        tansu = str(tansu_binary())
        url = f"tcp://{ip('broker')}:9092"
        daemon_jvm, executor_jvm = cluster_jvm()
        spark_env = {**daemon_jvm, "SPARK_HOME": str(SPARK_HOME), "SPARK_DAEMON_MEMORY": "256m"}
        master = f"spark://{ip('master')}:7077"
        conf, events = self.directory / "spark-conf", self.directory / "spark-events"
        conf.mkdir(parents=True, exist_ok=True)
        events.mkdir(exist_ok=True)
        (conf / "spark-defaults.conf").write_text(
            "".join(
                f"{k} {v}\n"
                for k, v in {
                    "spark.executor.memory": "512m",
                    "spark.driver.memory": "512m",
                    "spark.driver.host": ip("driver"),
                    "spark.driver.bindAddress": ip("driver"),
                    "spark.ui.enabled": "false",
                    "spark.ui.showConsoleProgress": "false",
                    "spark.executor.heartbeatInterval": "5s",
                    # Spark's own record of every job, stage and task, for a campaign's post-mortem
                    "spark.eventLog.enabled": "true",
                    "spark.eventLog.dir": events.as_uri(),
                    "spark.eventLog.compress": "false",  # JSON lines, read with no codec
                    **executor_jvm,
                }.items()
            )
        )
        blocks = "s3://blocks/b"  # the one store of the receivers, the tracker and the driver
        # time runs faster here (10 s batches and retention): a file a killed receiver left behind is
        # gone within 30 s, before the checker counts what outlived retention
        receiver = receiver_argv(
            self.tracker,
            bootstrap=self.bootstrap,
            topic=self.topic,
            group=self.group,
            block_store=blocks,
            block_interval_ms=2000,
            extra=["--heartbeat-interval-ms", "500", "--orphan-grace-ms", "15000"],
            program=[PY, "-m", RECEIVER_MODULE],
        )
        worker = [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", "--cores", "1"]
        worker += ["--memory", "1g", "--webui-port", "8081", "--work-dir", "work"]

        def tracker(host: str, standby: bool) -> Service:
            """With a standby, both follow one log on the store, and a tracker started again comes back
            as a standby (as the operations guide says to deploy them: one that came back as a leader
            would depose the one serving); alone, its log is in its working directory."""
            command = tracker_argv(
                f"{ip(host)}:7100",
                "s3://trackerlog/wal" if self.standby else "wal",
                block_store=blocks,
                extra=["--insecure", "true", "--remember-ms", str(self.remember_ms)],
                program=[PY, "-m", TRACKER_MODULE],
            )

            def arguments() -> list[str]:
                again = self.standby and service.starts > 0
                return [*command, *(["--standby"] if standby or again else [])]

            service = Service(host, host, 7100, arguments, keep_dir=not self.standby)
            return service

        def spark_worker(host: str) -> Service:
            return Service(
                host,
                host,
                None,
                lambda: [*worker, "--host", ip(host), master],
                {**spark_env, "SPARK_LOCAL_IP": ip(host)},
            )

        services = [
            Service(
                "store", "store", 5000, lambda: [str(Path(PY).parent / "moto_server"), "-H", ip("store"), "-p", "5000"]
            ),
            Service(
                "broker",
                "broker",
                9092,
                lambda: [
                    tansu,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "s3://tansu/",
                ],
            ),
            *(tracker(host, standby=index > 0) for index, host in enumerate(self.trackers)),
            Service("recv1", "recv1", None, lambda: [*receiver, "--receiver-id", "r1"], env=TANSU_GAPS),
            Service("recv2", "recv2", None, lambda: [*receiver, "--receiver-id", "r2"], env=TANSU_GAPS),
            Service(
                "master",
                "master",
                7077,
                lambda: [
                    str(SPARK_HOME / "bin" / "spark-class"),
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    ip("master"),
                    "--port",
                    "7077",
                    "--webui-port",
                    "8080",
                ],
                {**spark_env, "SPARK_LOCAL_IP": ip("master")},
            ),
            *(spark_worker(w) for w in ("worker1", "worker2")),
            Service(
                "driver",
                "driver",
                None,
                lambda: driver_argv(
                    self.tracker,
                    app="sluice.testing.chaos_workload:write_records",
                    master=master,
                    batch_interval_ms=self.batch_interval_ms,
                    block_store=blocks,
                    # Under a fault every few seconds a batch is small because the pipeline stalled,
                    # not because it is slow; Spark's PID reads it as capacity and sits at its floor
                    # (100/s: twice the producer), where a backlog never drains.  An operator raises
                    # the floor above the input rate, as Spark's pid.minRate is there for.
                    extra=["--initial-rate", "2000", "--estimator-pid-min-rate", "1000"],
                    program=[PY, "-m", DRIVER_MODULE],
                ),
                {
                    "SPARK_CONF_DIR": str(conf),
                    "SPARK_LOCAL_IP": ip("driver"),
                    "SLUICE_CHAOS_OUT": str(self.output),
                    **aws,
                },
            ),
        ]
        self.services = {s.name: s for s in services}

    def _start_ready(self, name: str) -> None:
        self.start(name)
        port = self.services[name].port
        assert port is not None
        self._wait(lambda: self.reachable(self.services[name].host, port), f"{name} to listen on {port}", 120)

    def _text(self, name: str) -> str:
        return self.log(name).read_text(errors="replace") if self.log(name).exists() else ""

    def _wait(self, predicate: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            dead = [s.name for s in self.services.values() if s.proc is not None and not s.alive]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"timed out after {timeout:.0f} s"
                raise ProcessError(f"waiting for {what}: {why} (logs in {self.directory / 'logs'})")
            time.sleep(0.5)


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
