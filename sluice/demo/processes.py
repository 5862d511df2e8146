"""The demo's child processes: started in their own process groups, all stopped on the way out.

Each child gets a new session (:func:`sluice.embedded.start_process`), so Ctrl-C in the terminal
reaches only the demo, which then stops the children in reverse start order: SIGTERM (each service
stops gracefully), then SIGKILL for what is left of each group. Preconditions (Java, free ports) are
checked before anything starts, each failing with one line.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sluice.embedded import start_process, stop_process
from sluice.errors import SluiceError


class DemoError(SluiceError):
    """A precondition or start-up failure, said in one line to the user."""


def check_java() -> str:
    """The java executable PySpark will use, or a DemoError naming what to install."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
    if java is None:
        raise DemoError(
            "Java is missing: PySpark needs Java 17 or newer "
            "(Debian: apt-get install openjdk-17-jre-headless, or set JAVA_HOME)"
        )
    return java


def check_port_free(port: int, what: str, host: str = "127.0.0.1") -> None:
    """Bind-test ``port``; a DemoError names the port, its role and the flag that moves it."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise DemoError(
                f"port {port} ({what}) is in use on {host}; stop what holds it or choose another "
                "with --tracker-port / --metrics-port"
            ) from None


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
    """The processes the demo started, stopped together (reverse order) by :meth:`stop_all`.

    :param log_dir: each child's output goes to ``<log_dir>/<name>.log``.
    :param env: environment every child gets on top of the demo's own (e.g. ``SLUICE_LOG_LEVEL``).
    """

    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)

    def start(
        self, name: str, args: Sequence[str], *, env: dict[str, str] | None = None, stdout: int | None = None
    ) -> subprocess.Popen:
        """Start ``args`` in a new session; its output goes to ``<log_dir>/<name>.log`` unless piped."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        proc = start_process(args, log=self.log_dir / f"{name}.log", env={**self.env, **(env or {})}, stdout=stdout)
        self.procs.append((name, proc))
        return proc

    def stop(self, name: str, timeout: float = 20.0) -> int | None:
        for entry in self.procs:
            if entry[0] == name:
                self.procs.remove(entry)
                return stop_process(entry[1], timeout=timeout)
        return None

    def stop_all(self, timeout: float = 20.0) -> dict[str, int | None]:
        """SIGTERM each child (last started first), SIGKILL what is left of its group.

        Each group is stopped once: a second call (the clean-up after a normal end) does not signal
        a process id that may since belong to someone else.
        """
        codes = {}
        while self.procs:
            name, proc = self.procs.pop()
            codes[name] = stop_process(proc, timeout=timeout)
        return codes

    def pids(self) -> list[int]:
        return [proc.pid for _, proc in self.procs]
