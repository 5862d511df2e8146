"""Child processes on loopback: free ports, starting, watching and stopping them, Sluice services.

The demo starts a whole pipeline this way, and the tests and benchmarks start the same real
processes with the same helpers, so there is one way to start, watch and stop them.  Each child
runs in a new session (its own process group) and is asked to die with its parent, so a killed
parent leaves nothing behind: :func:`stop_process` sends the stop signal, waits, and then kills
whatever is left of the group.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sluice.errors import SluiceError

__all__ = [
    "ProcessError",
    "TrackerProcess",
    "driver_argv",
    "free_port",
    "receiver_argv",
    "start_process",
    "start_service",
    "start_tracker",
    "stop_process",
    "tracker_argv",
    "wait_for_port",
    "wait_until",
]


class ProcessError(SluiceError, RuntimeError):
    """A child that did not start, did not listen, or died while it was waited for (one line)."""


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A loopback port nothing listens on now (the caller binds it soon after).

    Picked at random below the kernel's ephemeral range: a port the kernel hands out (``bind`` to
    0) is one it also hands to outgoing connections, and with many processes connecting (tests on
    parallel workers, a broker's clients) one of those could take the port in the seconds before a
    child binds it.  Below the range only another listener can, which the caller's retry or the
    child's bind error shows."""
    low, _ = _ephemeral_range()
    for _ in range(200):
        port = random.randrange(max(1024, low - 16384), low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # a crowded low range: let the kernel pick
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
        # in the child before exec: only what prctl needs
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
    cwd: Path | None = None,
) -> subprocess.Popen:
    """Start ``args`` in a new session (in ``cwd``, default this one's working directory); output
    appends to ``log`` (else is dropped) unless ``stdout``."""
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
            cwd=cwd,
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
    cwd: Path | None = None,
) -> subprocess.Popen:
    """Start ``python <args>`` (``["-m", "sluice.tracker.server.cli", ...]``) in ``cwd``; wait for ``port`` if given."""
    proc = start_process([sys.executable, *args], log=log, env=env, cwd=cwd)
    if port is not None:
        try:
            wait_for_port(port, proc, name=name)
        except BaseException:
            stop_process(proc, timeout=5)
            raise
    return proc


TRACKER_MODULE = "sluice.tracker.server.cli"
RECEIVER_MODULE = "sluice.receiver.cli"
DRIVER_MODULE = "sluice.spark_driver.cli"


def _flags(pairs: Sequence[tuple[str, object]]) -> list[str]:
    """``--flag value`` for each pair whose value is given (None leaves the setting to its default)."""
    return [arg for flag, value in pairs if value is not None for arg in (flag, str(value))]


def tracker_argv(
    listen: str | None,
    wal_dir: Path | str,
    *,
    block_store: str | None = None,
    extra: Sequence[str] = (),
    program: Sequence[str] = ("-m", TRACKER_MODULE),
) -> list[str]:
    """A ``sluice-tracker`` command line: ``program`` (by default the interpreter's arguments that
    run the tracker, what :func:`start_service` takes; a console script's path for a whole command
    line), then its settings and ``extra`` last, so ``extra`` may override them.  ``listen`` None
    leaves ``tracker.listen`` to its configured default (a tracker refused before it binds).

    The one place the tracker's command line is spelled, so the demo, the benchmarks, the chaos
    cluster and the tests start it alike."""
    settings = _flags([("--listen", listen), ("--wal-dir", wal_dir), ("--block-store", block_store)])
    return [*program, *settings, *extra]


def receiver_argv(
    tracker: str | None,
    *,
    source: str | None = "kafka",
    bootstrap: str | None = None,
    topic: str | None = None,
    group: str | None = None,
    block_store: str | None = None,
    block_interval_ms: int | None = None,
    receiver_id: str | None = None,
    extra: Sequence[str] = (),
    program: Sequence[str] = ("-m", RECEIVER_MODULE),
) -> list[str]:
    """A ``sluice-receiver`` command line, as :func:`tracker_argv` builds the tracker's: the
    settings given (None leaves one to its configured default), then ``extra``.

    :param tracker: the tracker's ``HOST:PORT`` (None: a receiver refused before it connects).
    :param source: ``--source`` (``kafka``, ``generator``, ``socket``, a plugin's name).
    :param bootstrap: the Kafka source's ``--bootstrap-servers``.
    """
    return [
        *program,
        *_flags(
            [
                ("--tracker", tracker),
                ("--source", source),
                ("--bootstrap-servers", bootstrap),
                ("--topic", topic),
                ("--group-id", group),
                ("--block-store", block_store),
                ("--block-interval-ms", block_interval_ms),
                ("--receiver-id", receiver_id),
            ]
        ),
        *extra,
    ]


def driver_argv(
    tracker: str | None = None,
    *,
    app: str | None = None,
    master: str | None = None,
    source: str | None = None,
    batch_interval_ms: int | None = None,
    block_store: str | None = None,
    extra: Sequence[str] = (),
    program: Sequence[str] = ("-m", DRIVER_MODULE),
) -> list[str]:
    """A ``sluice-driver`` command line, as :func:`tracker_argv` builds the tracker's: the settings
    given (None leaves one to its configured default), then ``extra``.

    :param tracker: the tracker's ``HOST:PORT`` (None in direct mode, which reads Kafka itself).
    :param app: the batch function, ``module:function``.
    :param source: ``--source`` (``receivers``, ``direct-kafka``).
    """
    return [
        *program,
        *_flags(
            [
                ("--tracker", tracker),
                ("--app", app),
                ("--master", master),
                ("--source", source),
                ("--batch-interval-ms", batch_interval_ms),
                ("--block-store", block_store),
            ]
        ),
        *extra,
    ]


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
    wal_dir: Path | str
    log: Path

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        return stop_process(self.proc, sig)


def start_tracker(
    wal_dir: Path | str,
    *,
    port: int | None = None,
    log: Path | None = None,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    block_store: str | None = None,
) -> TrackerProcess:
    """A real ``sluice-tracker`` on 127.0.0.1 (a free port unless given), listening when this returns.

    ``wal_dir`` may be a shared log's URL (``s3://...``; then give ``log``, and ``env`` to reach the store).
    ``block_store`` is the store its receivers write to: the tracker refuses blocks outside it (default
    ``tracker.block_store``'s, ``./sluice-blocks`` of this process's working directory)."""
    port = port or free_port()
    log = log or Path(wal_dir).parent / "tracker.log"
    proc = start_service(
        tracker_argv(f"127.0.0.1:{port}", wal_dir, block_store=block_store or None, extra=args),
        port=port,
        env=env,
        log=log,
        name="sluice-tracker",
    )
    return TrackerProcess(f"127.0.0.1:{port}", proc, wal_dir, log)
