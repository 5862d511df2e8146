"""Test plumbing has one home: certificates come from :mod:`sluice.embedded.certs`, not from
``openssl`` command lines copied into tests and benches, and the services' command lines from
:func:`~sluice.embedded.tracker_argv` and :func:`~sluice.embedded.receiver_argv`, which the
services' own parsers read as meant.

A copy drifts (one makes RSA keys with no extensions, another EC keys with SANs) and each copy
is one more place to fix when a TLS check tightens; the helper is the only place that runs
``openssl``.  The scan reads the source with :mod:`ast`, so a comment or a docstring that names
the tool is no call.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from sluice.config import parse_args
from sluice.embedded import driver_argv, receiver_argv, tracker_argv
from sluice.receiver.cli import SECTIONS as RECEIVER_SECTIONS
from sluice.spark_driver.cli import SECTIONS as DRIVER_SECTIONS

REPO = Path(__file__).resolve().parent.parent
TOOL = "openssl"


def _argv_head(node: ast.AST) -> ast.expr | None:
    """The expression that names the program: a list's or tuple's first element, a call's first
    argument (``subprocess.run("openssl req ...", shell=True)``)."""
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        return node.elts[0]
    if isinstance(node, ast.Call) and node.args:
        return node.args[0]
    return None


def openssl_calls(root: Path) -> Iterator[str]:
    """``path:line`` of every command line under ``root`` whose program is ``openssl``."""
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if TOOL not in text:  # parse only the files that could hold one
            continue
        heads = []
        for node in ast.walk(ast.parse(text, str(path))):
            head = _argv_head(node)
            if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.split(" ", 1)[0] == TOOL:
                heads.append(head.lineno)
        yield from (f"{path.relative_to(root)}:{line}" for line in sorted(set(heads)))


def test_no_test_or_bench_runs_openssl_itself() -> None:
    calls = [f"{d}/{c}" for d in ("tests", "bench") for c in openssl_calls(REPO / d)]
    assert calls == [], f"make certificates with sluice.embedded.certs, not openssl directly: {calls}"


def test_the_scan_finds_a_copied_command_line_and_ignores_prose(tmp_path: Path) -> None:
    (tmp_path / "copied.py").write_text(
        '"""Certificates openssl makes."""\nimport subprocess\n'
        'subprocess.run(["openssl", "req", "-x509"], check=True)\n'
        'subprocess.run("openssl genrsa 2048", shell=True)\n'
    )
    assert list(openssl_calls(tmp_path)) == ["copied.py:3", "copied.py:4"]


def test_the_receiver_parser_reads_each_setting_the_builder_is_given() -> None:
    argv = receiver_argv(
        "127.0.0.1:7",
        bootstrap="127.0.0.1:9092",
        topic="t",
        group="g",
        block_store="file:///blocks",
        block_interval_ms=300,
        receiver_id="r1",
        extra=["--block-interval-ms", "400"],
    )
    assert argv[:2] == ["-m", "sluice.receiver.cli"]
    config, _ = parse_args("sluice-receiver", "", RECEIVER_SECTIONS, "receiver", argv[2:])
    got = {k: config[k] for k in ("receiver.tracker", "receiver.source", "receiver.block_store")}
    assert got == {
        "receiver.tracker": "127.0.0.1:7",
        "receiver.source": "kafka",
        "receiver.block_store": "file:///blocks",
    }
    assert (config["kafka.bootstrap_servers"], config["kafka.topic"], config["kafka.group_id"]) == (
        "127.0.0.1:9092",
        "t",
        "g",
    )
    assert config["receiver.receiver_id"] == "r1"
    assert config["receiver.block_interval_ms"] == 400  # extra comes last, so it overrides


def test_the_tracker_parser_reads_the_builder_s_command_line() -> None:
    argv = tracker_argv("127.0.0.1:7100", "wal", block_store="file:///blocks", program=["sluice-tracker"])
    assert argv[0] == "sluice-tracker"
    config, _ = parse_args("sluice-tracker", "", ("tracker", "log"), "tracker", argv[1:])
    assert (config["tracker.listen"], config["tracker.wal_dir"]) == ("127.0.0.1:7100", "wal")
    assert config["tracker.block_store"] == "file:///blocks"


def test_the_driver_parser_reads_each_setting_the_builder_is_given() -> None:
    argv = driver_argv(
        "127.0.0.1:7",
        app="m:f",
        master="local[1]",
        source="receivers",
        batch_interval_ms=300,
        block_store="file:///blocks",
        extra=["--batch-interval-ms", "400"],
    )
    assert argv[:2] == ["-m", "sluice.spark_driver.cli"]
    config, _ = parse_args("sluice-driver", "", DRIVER_SECTIONS, "driver", argv[2:])
    got = {k: config[k] for k in ("driver.tracker", "driver.app", "driver.master", "driver.source")}
    assert got == {
        "driver.tracker": "127.0.0.1:7",
        "driver.app": "m:f",
        "driver.master": "local[1]",
        "driver.source": "receivers",
    }
    assert config["driver.block_store"] == "file:///blocks"
    assert config["driver.batch_interval_ms"] == 400  # extra comes last, so it overrides
    assert "--tracker" not in driver_argv(app="m:f", source="direct-kafka")  # direct mode names no tracker
