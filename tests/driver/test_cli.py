"""sluice-driver's command line: settings checked before Spark starts, app loading, metrics names."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sluice.config import ConfigError, resolve
from sluice.embedded import driver_argv
from sluice.spark_driver import cli


def test_load_app_names_what_is_wrong() -> None:
    assert cli.load_app("tests.driver.apps:write_values").__name__ == "write_values"
    with pytest.raises(ConfigError, match="expected module:function"):
        cli.load_app("no_colon")
    with pytest.raises(ConfigError, match="cannot be imported"):
        cli.load_app("no_such_module_xyz:fn")
    with pytest.raises(ConfigError, match="has no attribute nope"):
        cli.load_app("tests.driver.apps:nope")


def test_estimator_options_from_config() -> None:
    config = resolve(cli.SECTIONS, {"estimator.pid.integral": 0.5})
    options = cli.estimator_options(config)
    assert options["integral"] == 0.5 and options["proportional"] == 1.0 and options["min_rate"] == 100.0


@pytest.mark.slow
def test_bad_values_exit_2_with_one_line_before_spark_starts() -> None:
    result = subprocess.run(
        [sys.executable, *driver_argv(batch_interval_ms=0)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "driver.batch_interval_ms = '0'" in result.stderr and "above 0" in result.stderr
    result = subprocess.run(
        [sys.executable, *driver_argv(app="no_colon")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "expected module:function" in result.stderr


def test_driver_metrics_are_registered() -> None:
    from sluice.spark_driver.metrics import REGISTRY

    names = {m.name for c in list(REGISTRY._collector_to_names) for m in (getattr(c, "describe", None) or c.collect)()}
    for name in (
        "sluice_batch_processing_seconds",
        "sluice_batch_scheduling_delay_seconds",
        "sluice_batch_total_delay_seconds",
        "sluice_batch_records",
        "sluice_batches_pending",
        "sluice_batches_completed",
        "sluice_batches_failed",
        "sluice_falling_behind",
    ):
        assert name in names


def test_the_spark_submit_entry_file_is_found_without_knowing_the_install() -> None:
    """The docs' ``spark-submit "$(python -m sluice.spark_driver.submit --path)"`` names the real file."""
    import subprocess
    import sys
    from pathlib import Path

    result = subprocess.run(
        [sys.executable, "-m", "sluice.spark_driver.submit", "--path"], capture_output=True, text=True, timeout=60
    )
    path = Path(result.stdout.strip())
    assert result.returncode == 0 and path.name == "submit.py" and "submit_main" in path.read_text()
