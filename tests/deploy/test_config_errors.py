"""A bad value stops a service before it starts, with one line naming key, value and what is allowed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.config import SCHEMA, SECTIONS, ConfigError, parse_args, resolve
from sluice.embedded import driver_argv, receiver_argv, tracker_argv

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "flags, key, value, allowed",
    [
        ({"tracker.listen": "nowhere"}, "tracker.listen", "'nowhere'", "HOST:PORT with a port from 1 to 65535"),
        ({"tracker.listen": "host:70000"}, "tracker.listen", "'host:70000'", "HOST:PORT"),
        (
            {"driver.trigger": "sometimes"},
            "driver.trigger",
            "'sometimes'",
            "one of fixed, processing-time, once, available-now",
        ),
        ({"driver.batch_interval_ms": "0"}, "driver.batch_interval_ms", "'0'", "a number above 0"),
        ({"estimator.pid.min_rate": "-5"}, "estimator.pid.min_rate", "'-5'", "a number above 0"),
        (
            {"receiver.block_store": "ftp://host/blocks"},
            "receiver.block_store",
            "'ftp://host/blocks'",
            "expected a URL whose scheme is one of abfs, adl, az, dbfs, file, gcs, gs, hdfs",
        ),
        (
            {"receiver.source": "carrier-pigeon"},
            "receiver.source",
            "'carrier-pigeon'",
            "expected one of generator, kafka, socket",
        ),
        ({"backpressure.enabled": "maybe"}, "backpressure.enabled", "'maybe'", "true or false"),
        ({"receiver.max_rate": "fast"}, "receiver.max_rate", "'fast'", "a number of 0 or more"),
    ],
)
def test_flag_value_names_key_value_and_allowed(flags: dict, key: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(SECTIONS, flags=flags, environ={})
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{key} = {value}") and allowed in message and "flag" in message


def test_environment_value_is_checked_and_named() -> None:
    with pytest.raises(
        ConfigError,
        match=r"receiver.block_queue_size = 'ten' \(from environment "
        r"SLUICE_RECEIVER_BLOCK_QUEUE_SIZE\)",
    ):
        resolve(["receiver"], environ={"SLUICE_RECEIVER_BLOCK_QUEUE_SIZE": "ten"})


def test_toml_value_is_checked_and_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "sluice.toml"
    config.write_text('[kafka]\nauto_offset_reset = "middle"\n')
    with pytest.raises(
        ConfigError,
        match=r"kafka.auto_offset_reset = 'middle' \(from config file .*sluice.toml\) "
        r"is not allowed: expected one of earliest, latest",
    ):
        resolve(["kafka"], config_file=str(config), environ={})


def test_unknown_toml_key_and_section_are_named(tmp_path: Path) -> None:
    config = tmp_path / "sluice.toml"
    config.write_text("[driver]\nbatch_intervall_ms = 5\n")
    with pytest.raises(ConfigError, match="unknown key driver.batch_intervall_ms"):
        resolve(["driver"], config_file=str(config), environ={})
    config.write_text("[drivers]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"unknown section \[drivers\]"):
        resolve(["driver"], config_file=str(config), environ={})


def test_precedence_default_file_environment_flag(tmp_path: Path) -> None:
    config = tmp_path / "sluice.toml"
    config.write_text("[driver]\nbatch_interval_ms = 2000\n")
    assert resolve(["driver"], environ={})["driver.batch_interval_ms"] == 1000
    assert resolve(["driver"], config_file=str(config), environ={})["driver.batch_interval_ms"] == 2000
    env = {"SLUICE_DRIVER_BATCH_INTERVAL_MS": "3000"}
    assert resolve(["driver"], config_file=str(config), environ=env)["driver.batch_interval_ms"] == 3000
    flags = {"driver.batch_interval_ms": "4000"}
    assert resolve(["driver"], flags=flags, config_file=str(config), environ=env)["driver.batch_interval_ms"] == 4000


def test_example_config_is_valid_for_every_section() -> None:
    config = resolve(SECTIONS, config_file=str(REPO / "deploy" / "sluice.toml"), environ={})
    assert config["estimator.pid.min_rate"] == 100.0 and config["tracker.wal_dir"] == "/var/lib/sluice/wal"


def test_every_key_is_a_flag_of_its_service() -> None:
    """Each key of a section is settable on the command line of the service that reads it."""
    for key in SCHEMA:
        if key.type is dict:
            continue  # TOML tables (kafka.client, estimator.options) have no flag
        config, _ = parse_args("svc", "", [key.section], key.section, [key.flag(key.section), _valid(key)])
        assert config[key.dotted] == key.coerce(_valid(key), "test")


def _valid(key) -> str:
    if key.choices:
        return key.choices[-1]
    if key.dotted == "receiver.source":
        return "generator"
    if key.dotted == "estimator.name":
        return "constant"
    return {
        "tracker.listen": "127.0.0.1:7101",
        "receiver.tracker": "127.0.0.1:7101",
        "driver.tracker": "127.0.0.1:7101",
        "receiver.block_store": "file:///tmp/b",
        "tracker.block_store": "file:///tmp/b",
        "driver.block_store": "file:///tmp/b",
        "tracker.max_frame_bytes": "2048",
        "log.level": "debug",
    }.get(key.dotted, {str: "x", int: "7", float: "2.5", bool: "false"}[key.type])


def test_parse_args_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args("sluice-tracker", "", ["tracker"], "tracker", ["--listen", "nowhere"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("sluice-tracker: tracker.listen = 'nowhere' (from flag --listen) is not allowed")


@pytest.mark.parametrize(
    "script, args, key",
    [
        ("sluice-tracker", ["--listen", "nowhere", "--wal-dir", "{tmp}/wal"], "tracker.listen = 'nowhere'"),
        ("sluice-receiver", ["--source", "carrier-pigeon"], "receiver.source = 'carrier-pigeon'"),
        ("sluice-driver", ["--trigger", "sometimes"], "driver.trigger = 'sometimes'"),
    ],
)
@pytest.mark.slow
def test_real_service_with_a_bad_value_exits_2_with_one_line(
    script: str, args: list[str], key: str, tmp_path: Path
) -> None:
    path = shutil.which(script, path=str(Path(sys.executable).parent))
    assert path is not None, f"{script} is not installed (console script missing from .venv/bin: `make install`)"
    result = subprocess.run(
        [path, *(a.format(tmp=tmp_path) for a in args)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{script}: {key}") and "is not allowed: expected" in lines[0]
    assert not (tmp_path / "wal").exists(), "the service started doing work before checking its configuration"


def test_topic_weights_must_be_numbers_above_zero(tmp_path: Path) -> None:
    config = tmp_path / "sluice.toml"
    config.write_text("[kafka]\ntopic_weights = { orders = 3, clicks = 0 }\n")
    with pytest.raises(ConfigError, match=r"kafka.topic_weights = .* is not allowed: expected a table of topic = a"):
        resolve(["kafka"], config_file=str(config), environ={})
    config.write_text("[kafka]\ntopic_weights = { orders = 3, clicks = 0.5 }\n")
    assert resolve(["kafka"], config_file=str(config), environ={})["kafka.topic_weights"] == {
        "orders": 3,
        "clicks": 0.5,
    }


def _hostile(tmp_path: Path, kind: str) -> str:
    """A path a hostile or careless operator might name as a small file."""
    if kind == "a character device":
        return "/dev/zero"  # reads forever
    path = tmp_path / kind.replace(" ", "-")
    if kind == "a FIFO":
        os.mkfifo(path)  # opened plainly, blocks until a writer comes
    elif kind == "300 MiB":
        with path.open("wb") as fh:
            fh.truncate(300 << 20)  # sparse: no disk, but a plain read allocates it all
    elif kind == "50,000 levels":
        path.write_text("x = " + "[" * 50_000 + "]" * 50_000 + "\n")
    return str(path)


TOKEN = "allowed: a regular file of at most 4,096 bytes"
CONFIG = "allowed: a regular file of at most 1,048,576 bytes"
DEVICE = "auth token file {path} is a character device; " + TOKEN


@pytest.mark.slow
@pytest.mark.parametrize(
    ("service", "flag", "kind", "said"),
    [
        ("tracker", "--auth-token-file", "a character device", DEVICE),
        ("tracker", "--receiver-token-file", "a FIFO", "auth token file {path} is a FIFO; " + TOKEN),
        ("tracker", "--driver-token-file", "300 MiB", "auth token file {path} holds 314,572,800 bytes; " + TOKEN),
        ("receiver", "--auth-token-file", "a FIFO", "auth token file {path} is a FIFO; " + TOKEN),
        ("driver", "--auth-token-file", "a character device", DEVICE),
        ("tracker", "--config", "a FIFO", "config file {path} is a FIFO; " + CONFIG),
        (
            "tracker",
            "--config",
            "50,000 levels",
            "config file {path} nests too deep to read; allowed: tables and arrays a few levels deep",
        ),
        ("receiver", "--metrics-web-config", "a FIFO", "receiver.metrics_web_config {path} is a FIFO; " + CONFIG),
    ],
)
def test_a_file_that_is_not_a_small_regular_file_stops_the_service_with_one_line(
    tmp_path: Path, service: str, flag: str, kind: str, said: str
) -> None:
    """/dev/zero read until memory ran out, a FIFO hung the start with nothing logged, 300 MiB were
    read whole, and deep nesting was a RecursionError's traceback."""
    path = _hostile(tmp_path, kind)
    argv = {
        "tracker": tracker_argv(None, "wal", extra=[flag, path]),
        "receiver": receiver_argv("127.0.0.1:1", source=None, extra=["--metrics-port", "0", flag, path]),
        "driver": driver_argv(app="sluice.demo.app:word_count", extra=[flag, path]),
    }[service]
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [f"sluice-{service}: " + said.format(path=path)]
