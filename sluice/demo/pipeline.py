"""Starting the demo's processes: broker, topic, tracker, receiver workers and the load generator.

Every process is a :class:`~sluice.demo.processes.Children` member (own process group,
stopped on the way out); the driver runs inside the demo's process so the live table can listen
to its batches. Ports are fixed by default (the deploy/ Prometheus config scrapes the same ones:
tracker 7100, metrics tracker 9100, driver 9102, receivers 9111 and 9112); a default that is taken
(another demo on the host) is replaced by a free port, and the demo says which. 0 picks free ports.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sluice import embedded
from sluice.demo.processes import Children, DemoError, check_port_free, console_script
from sluice.embedded import free_port, receiver_argv, tracker_argv, wait_for_port
from sluice.storage.block_store import file_store_url

TRACKER_PORT = 7100
METRICS_PORT = 9100


@dataclass
class Ports:
    """Loopback ports of the run (``metrics`` base: tracker +0, driver +2, receiver i +10+i)."""

    tracker: int
    tracker_metrics: int
    driver_metrics: int
    receiver_metrics: list[int]

    @classmethod
    def choose(cls, tracker: int | None, metrics: int | None, receivers: int) -> tuple[Ports, list[str]]:
        """The run's ports and a line for each default that was taken and replaced.

        ``None``: the default, or a free port when it is taken; 0: a free port; a port given on
        the command line must be free (a DemoError naming it otherwise), since the user chose it.
        """
        notes: list[str] = []

        def pick(given: int | None, default: int, what: str) -> int:
            if given == 0:
                return free_port()
            try:
                check_port_free(default if given is None else given, what)
            except DemoError:
                if given is not None:
                    raise
                port = free_port()
                notes.append(f"port {default} ({what}) is in use; using {port} instead")
                return port
            return default if given is None else given

        def metrics_port(offset: int, what: str) -> int:
            given = metrics if not metrics else metrics + offset  # None and 0 as they are
            return pick(given, METRICS_PORT + offset, what)

        ports = cls(
            pick(tracker, TRACKER_PORT, "tracker RPC"),
            metrics_port(0, "tracker metrics"),
            metrics_port(2, "driver metrics"),
            [metrics_port(10 + i, f"receiver {i} metrics") for i in range(1, receivers + 1)],
        )
        return ports, notes

    def metrics_urls(self) -> dict[str, str]:
        urls = {
            "tracker": f"http://127.0.0.1:{self.tracker_metrics}/metrics",
            "driver": f"http://127.0.0.1:{self.driver_metrics}/metrics",
        }
        for i, port in enumerate(self.receiver_metrics, 1):
            urls[f"receiver {i}"] = f"http://127.0.0.1:{port}/metrics"
        return urls


def start_broker(children: Children, directory: Path) -> str:
    """The embedded broker, Apache Kafka's own (one KRaft node, its jars fetched from Maven Central
    once), on free loopback ports, as a child of the demo; its data and log under ``directory``."""
    return embedded.start_kafka(start=lambda args: children.start("broker", args), tmp=directory).bootstrap


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic``; retried while a just-started broker is not ready yet."""
    asyncio.run(embedded.create_topic(bootstrap, partitions, topic))


def start_tracker(children: Children, ports: Ports, wal_dir: Path, block_dir: Path) -> str:
    """The tracker, taking only blocks the receivers store in ``block_dir``."""
    proc = children.start(
        "tracker",
        tracker_argv(
            f"127.0.0.1:{ports.tracker}",
            wal_dir,
            block_store=file_store_url(block_dir),
            extra=["--metrics-port", str(ports.tracker_metrics)],
            program=[console_script("sluice-tracker")],
        ),
    )
    wait_for_port(ports.tracker, proc, name="sluice-tracker")
    return f"127.0.0.1:{ports.tracker}"


def start_receivers(
    children: Children, ports: Ports, tracker: str, bootstrap: str, topic: str, group: str, block_dir: Path
) -> None:
    """Two (or more) receiver workers in one consumer group: Kafka shares the partitions among them."""
    script = console_script("sluice-receiver")
    procs = []
    for i, metrics_port in enumerate(ports.receiver_metrics, 1):
        procs.append(
            (
                i,
                metrics_port,
                children.start(
                    f"receiver-{i}",
                    receiver_argv(
                        tracker,
                        bootstrap=bootstrap,
                        topic=topic,
                        group=group,
                        block_store=file_store_url(block_dir),
                        extra=["--stream-id", "0", "--metrics-port", str(metrics_port)],
                        program=[script],
                    ),
                ),
            )
        )
    for i, metrics_port, proc in procs:
        wait_for_port(metrics_port, proc, name=f"sluice-receiver {i}")


@dataclass
class LoadProgress:
    """What the load generator reported: offered rate over time and the acknowledged total."""

    samples: list[tuple[float, float]] = field(default_factory=list)
    acked: int = 0
    failed: int = 0
    done: threading.Event = field(default_factory=threading.Event)


def start_load(
    children: Children, bootstrap: str, topic: str, profile: str, seconds: float, base_rate: float
) -> LoadProgress:
    """The load generator as a child process; a thread reads its JSON progress lines."""
    proc = children.start(
        "load",
        [
            sys.executable,
            "-m",
            "sluice.demo.load",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            topic,
            "--profile",
            profile,
            "--seconds",
            str(seconds),
            "--base-rate",
            str(base_rate),
        ],
        stdout=subprocess.PIPE,
    )
    progress = LoadProgress()

    def read(stream: IO[bytes]) -> None:
        for raw in stream:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            progress.samples.append((line["t"], line["rate"]))
            progress.acked, progress.failed = line["acked"], line["failed"]
            if line.get("done"):
                progress.done.set()
        progress.done.set()  # the generator exited (normally or not)

    threading.Thread(target=read, args=(proc.stdout,), name="sluice-demo-load", daemon=True).start()
    return progress
