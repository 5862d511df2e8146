"""The demo's child processes: started in their own process groups, all stopped on the way out.

Each child gets a new session, so stopping it signals its whole group (a service and anything it
spawned) and Ctrl-C in the terminal reaches only the demo, which then stops the children in reverse
start order: SIGTERM (each service stops gracefully), then SIGKILL for a group that outlives the
grace time. Preconditions (Java, free ports) are checked before anything starts, each failing with
one line.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


class DemoError(Exception):
    """A precondition or start-up failure, said in one line to the user."""


def check_java() -> str:
    """The java executable PySpark will use, or a DemoError naming what to install."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
    if java is None:
        raise DemoError("Java is missing: PySpark needs Java 17 or newer "
                        "(Debian: apt-get install openjdk-17-jre-headless, or set JAVA_HOME)")
    return java


def check_port_free(port: int, what: str, host: str = "127.0.0.1") -> None:
    """Bind-test ``port``; a DemoError names the port, its role and the flag that moves it."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise DemoError(f"port {port} ({what}) is in use on {host}; stop what holds it or choose another "
                            "with --tracker-port / --metrics-port") from None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, name: str, timeout: float = 60.0) -> None:
    """Return once 127.0.0.1:port accepts; a DemoError if ``proc`` exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoError(f"{name} exited with status {proc.returncode} while starting (see its log)")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise DemoError(f"{name} did not listen on 127.0.0.1:{port} within {timeout:.0f} s (see its log)")


def console_script(name: str) -> str:
    """A console script of this installation (beside the running interpreter), or a DemoError."""
    path = Path(sys.executable).parent / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise DemoError(f"{name} is not installed (pip install -e . puts it beside {sys.executable})")
    return found


@dataclass
class Children:
    """The processes the demo started, stopped together (reverse order) by :meth:`stop_all`."""

    log_dir: Path
    procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)

    def start(self, name: str, args: Sequence[str], *, env: dict[str, str] | None = None,
              stdout: int | None = None) -> subprocess.Popen:
        """Start ``args`` in a new session; its output goes to ``<log_dir>/<name>.log`` unless piped."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")
        self._logs.append(log)
        proc = subprocess.Popen(list(args), stdout=stdout if stdout is not None else log, stderr=log,
                                stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                                start_new_session=True, preexec_fn=_die_with_parent)
        self.procs.append((name, proc))
        return proc

    def stop(self, name: str, timeout: float = 20.0) -> int | None:
        for entry in self.procs:
            if entry[0] == name:
                self.procs.remove(entry)
                return _stop_group(*entry, timeout)
        return None

    def stop_all(self, timeout: float = 20.0) -> dict[str, int | None]:
        """SIGTERM each group (last started first), SIGKILL what outlives ``timeout``; close logs.

        Each group is stopped once: a second call (the clean-up after a normal end) does not signal
        a process id that may since belong to someone else.
        """
        codes = {}
        while self.procs:
            name, proc = self.procs.pop()
            codes[name] = _stop_group(name, proc, timeout)
        for log in self._logs:
            log.close()
        self._logs.clear()
        return codes

    def pids(self) -> list[int]:
        return [proc.pid for _, proc in self.procs]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if the demo dies without cleaning up (even SIGKILL).

    Linux's PR_SET_PDEATHSIG fires when the thread that forked exits, so children are started from
    the demo's main thread only.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _stop_group(name: str, proc: subprocess.Popen, timeout: float) -> int | None:
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"sluice-demo: {name} did not stop within {timeout:.0f} s after SIGTERM; killing it", file=sys.stderr)
    # The leader may be gone while others of its group live on: make sure none is left.
    _signal_group(proc, signal.SIGKILL)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
    return proc.returncode


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the child is its group's leader: pgid == pid
    except (ProcessLookupError, PermissionError):
        pass
