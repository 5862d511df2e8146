"""One logger tree (``sluice.*``) and one way to set its level for every service: ``log.level``."""

from __future__ import annotations

import io
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.embedded import start_tracker
from sluice.logs import setup_logging

SCRIPTS = ("sluice-tracker", "sluice-receiver", "sluice-driver", "sluice-demo")


@pytest.mark.slow
def test_every_module_logger_is_under_sluice(tmp_path: Path) -> None:
    """Each module's logger hangs in the ``sluice`` tree, so ``log.level`` reaches all of them."""
    script = """
import importlib, logging, pkgutil, sys
bad, seen = [], 0
for top in ("sluice", "sluice.receiver", "sluice.tracker", "sluice.estimators", "sluice.spark_driver",
            "sluice.demo"):  # an editable install maps each folder
    for info in pkgutil.walk_packages(importlib.import_module(top).__path__, top + "."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, logging.Logger):
                seen += 1
                if not value.name.startswith("sluice."):
                    bad.append(f"{info.name}: {value.name}")
sys.exit("\\n".join(bad) if bad or seen < 20 else 0)
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


def test_only_the_sluice_tree_takes_the_level() -> None:
    """INFO for Sluice's lines; libraries (aiokafka's chatter, py4j's retried sends, which it logs at
    INFO on the root logger) show WARNING and above only."""
    root, ours = logging.getLogger(), logging.getLogger("sluice")
    saved = root.handlers[:], root.level, ours.level
    stream = io.StringIO()
    try:
        setup_logging("info", stream)
        logging.getLogger("sluice.tracker.server.server").info("ours at info")
        logging.info("Exception while sending command.")  # what py4j logs on a retried send
        logging.getLogger("aiokafka.conn").info("library chatter")
        logging.getLogger("aiokafka.conn").warning("library warning")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        ours.setLevel(saved[2])
    logged = stream.getvalue()
    assert "ours at info" in logged and "library warning" in logged, logged
    assert "sending command" not in logged and "library chatter" not in logged, logged


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_console_script_takes_the_log_level_key(script: str, tmp_path: Path) -> None:
    """A bad ``--log-level`` is refused before anything starts, naming the key: every service reads it."""
    path = Path(sys.executable).parent / script
    result = subprocess.run(
        [str(path), "--log-level", "LOUD"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"{script}: log.level = 'LOUD' (from flag --log-level) is not allowed: expected one of DEBUG, INFO, "
        "WARNING, ERROR (any case)"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "level, env, info_lines",
    [
        ("WARNING", {}, False),
        ("warning", {}, False),
        (None, {}, True),
        (None, {"SLUICE_LOG_LEVEL": "ERROR"}, False),
    ],
)
def test_the_level_decides_what_a_service_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str | None, env: dict, info_lines: bool
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    tracker = start_tracker(tmp_path / "wal", args=["--log-level", level] if level else [])
    assert tracker.stop(signal.SIGTERM) == 0
    logged = tracker.log.read_text()
    assert ("INFO sluice.tracker.server.cli: tracker listening on" in logged) is info_lines, logged
