"""Every configuration mistake stops a service before it starts anything (Spark included), with one
line that names what is wrong and what to use instead, and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sluice.config import SECTIONS, ConfigError, parse_args, resolve
from sluice.embedded import driver_argv


def _one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "variable, nearest",
    [
        ("SLUICE_TRACKER_METRICS_PROT", "SLUICE_TRACKER_METRICS_PORT"),
        ("SLUICE_TRACKR_LISTEN", "SLUICE_TRACKER_LISTEN"),
        ("SLUICE_ESTIMATOR_PID_MINRATE", "SLUICE_ESTIMATOR_PID_MIN_RATE"),
    ],
)
def test_environment_variable_typo_names_the_nearest_key(variable: str, nearest: str) -> None:
    # refused whichever service reads the environment: systemd and compose share one file
    with pytest.raises(ConfigError) as err:
        resolve(["log"], environ={variable: "9100"})
    assert _one_line(err) == f"environment variable {variable} names no configuration key; did you mean {nearest!r}?"


def test_unknown_variable_under_a_section_prefix_is_refused_without_a_guess() -> None:
    with pytest.raises(ConfigError, match="SLUICE_DRIVER_ZZZ names no configuration key; see docs/reference"):
        resolve(["driver"], environ={"SLUICE_DRIVER_ZZZ": "1"})


def test_other_sluice_variables_are_not_sluices_to_refuse() -> None:
    """A name under no section's prefix and near no key (a test harness's, an application's) passes."""
    config = resolve(["driver"], environ={"SLUICE_TEST_OUT": "/tmp/out", "SLUICE_APP_MODE": "x"})
    assert config["driver.batch_interval_ms"] == 1000


def test_a_table_in_the_environment_is_refused_not_ignored() -> None:
    with pytest.raises(ConfigError) as err:
        resolve(["kafka"], environ={"SLUICE_KAFKA_CLIENT": "security_protocol=SSL"})
    assert "kafka.client is a table, which only the --config TOML file can set" in _one_line(err)


def test_unknown_estimator_lists_the_available_ones_and_the_nearest() -> None:
    with pytest.raises(ConfigError) as err:
        resolve(["estimator"], flags={"estimator.name": "piid"}, environ={})
    assert _one_line(err) == (
        "estimator.name = 'piid' (from flag --estimator-name) is not allowed: "
        "expected one of adaptive, constant, pid; did you mean 'pid'?"
    )


def test_a_fixed_choice_suggests_the_nearest_too() -> None:
    with pytest.raises(ConfigError, match=r"processing-time, once, available-now; did you mean 'fixed'\?"):
        resolve(["driver"], flags={"driver.trigger": "fixd"}, environ={})


def test_help_states_the_precedence(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args("sluice-driver", "", SECTIONS, "driver", ["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Precedence, highest first: a flag, then the environment (SLUICE_<SECTION>_<KEY>), then the --config" in text
    assert "unless backpressure.resume_rate is false" in text and "--resume-rate" in text


def _driver(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, *driver_argv(extra=args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    return result, time.monotonic() - started


@pytest.mark.parametrize(
    "args, env, expected",
    [
        (
            ["--app", "sluice.demo.app:word_count", "--estimator", "piid"],
            {},
            "sluice-driver: estimator.name = 'piid' (from flag --estimator-name) is not allowed: expected one of "
            "adaptive, constant, pid; did you mean 'pid'?",
        ),
        (
            ["--app", "sluice.demo.app:word_count", "--config", "{tmp}/constant.toml"],
            {},
            "sluice-driver: estimator.options is not allowed: estimator 'constant': unknown option(s) 'rat'; "
            "allowed: rate",
        ),
        (
            ["--app", "sluice.demo.app:word_count"],
            {"SLUICE_DRIVER_METRICS_PROT": "9102"},
            "sluice-driver: environment variable SLUICE_DRIVER_METRICS_PROT names no configuration key; "
            "did you mean 'SLUICE_DRIVER_METRICS_PORT'?",
        ),
        (
            ["--app", "{tmp}/jobs/myjob.py:process"],
            {},
            "sluice-driver: driver.app = '{tmp}/jobs/myjob.py:process' names a file: pass the module form "
            "--app myjob:process and run from {tmp}/jobs (or put it on PYTHONPATH)",
        ),
    ],
    ids=["estimator-name", "estimator-option", "environment-typo", "app-file-path"],
)
@pytest.mark.timing(
    "tolerates 30 s for a check that takes a second alone: a machine several times busier than two cores"
)
@pytest.mark.slow
def test_real_driver_refuses_before_spark_starts(args: list[str], env: dict, expected: str, tmp_path: Path) -> None:
    (tmp_path / "constant.toml").write_text('[estimator]\nname = "constant"\n[estimator.options]\nrat = 5\n')
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "myjob.py").write_text("def process(batch):\n    pass\n")
    result, elapsed = _driver([a.format(tmp=tmp_path) for a in args], tmp_path, env)
    assert result.returncode == 2, result.stderr
    # one line and nothing else: Spark, had it started, would have logged its own lines
    assert result.stderr.splitlines() == [expected.format(tmp=tmp_path)]
    assert elapsed < 30, f"took {elapsed:.1f} s: something started before the check"
