"""promtool accepts the scrape configs and the rules, and each alert fires on a synthetic series."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.deploy.conftest import DEPLOY, need_tool
from tests.deploy.metric_names import known_series_names, names_used

PROM = DEPLOY / "prometheus"
WHY = "Debian package prometheus; `make system-deps` installs it when run as root"


def promtool(*args: str) -> subprocess.CompletedProcess:
    tool = need_tool("promtool", WHY)
    return subprocess.run([tool, *args], cwd=PROM, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("config", ["prometheus.yml", "prometheus-compose.yml"])
def test_check_config(config: str) -> None:
    result = promtool("check", "config", config)
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_rules() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_each_alert_fires_in_the_rule_tests() -> None:
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = set(re.findall(r"^\s*- alert: (\w+)", (PROM / "alerts.yml").read_text(), re.M))
    tested = set(
        re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels", (PROM / "alerts_test.yml").read_text())
    )
    assert alerts and alerts <= tested, f"alerts never shown firing: {sorted(alerts - tested)}"


def test_issue_alerts_are_present() -> None:
    alerts = set(re.findall(r"^\s*- alert: (\w+)", (PROM / "alerts.yml").read_text(), re.M))
    assert {
        "SluiceSchedulingDelayGrowing",
        "SluiceNoLiveReceivers",
        "SluiceRatePinnedAtMinimum",
        "SluiceWalFsyncSlow",
        "SluiceBatchesFailing",
    } <= alerts


def test_rules_use_only_known_metrics() -> None:
    unknown = names_used(PROM / "alerts.yml") - known_series_names()
    assert not unknown, f"alerts.yml names metrics no service exports: {sorted(unknown)}"


@pytest.mark.parametrize("config", ["prometheus.yml", "prometheus-compose.yml"])
def test_every_service_is_scraped(config: str) -> None:
    text = (PROM / config).read_text()
    for job in ("sluice-tracker", "sluice-receiver", "sluice-driver"):
        assert f"job_name: {job}" in text


def _labels(series: str) -> dict[str, str]:
    """``name{a="1",b="2"}`` → its labels (the name as ``__name__``)."""
    name, _, rest = series.partition("{")
    return {"__name__": name, **dict(re.findall(r'(\w+)="([^"]*)"', rest))}


def test_each_alert_is_tested_on_series_that_fire_and_series_that_do_not() -> None:
    """``promtool test rules`` checks exactly the alerts listed, so a test group proves an alert
    quiet on a series only if that series is in the group and no expected alert carries its
    labels, or an evaluation expects no alert at all."""
    import yaml

    alerts = set(re.findall(r"^\s*- alert: (\w+)", (PROM / "alerts.yml").read_text(), re.M))
    fires, quiet = set(), set()
    for group in yaml.safe_load((PROM / "alerts_test.yml").read_text())["tests"]:
        series = [_labels(s["series"]) for s in group["input_series"]]
        for case in group.get("alert_rule_test", []):
            expected = [a["exp_labels"] for a in case.get("exp_alerts") or []]
            if expected:
                fires.add(case["alertname"])
            firing = [{k: str(v) for k, v in e.items() if k != "severity"} for e in expected]
            healthy = [s for s in series if not any(f.items() <= s.items() for f in firing)]
            if not expected or healthy:
                quiet.add(case["alertname"])
    assert alerts <= fires, f"alerts never shown firing: {sorted(alerts - fires)}"
    assert alerts <= quiet, f"alerts never shown quiet on a healthy series: {sorted(alerts - quiet)}"
