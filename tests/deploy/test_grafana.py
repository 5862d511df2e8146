"""The provisioned Grafana dashboard: the panels the issue asks for, valid PromQL, known metrics."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.deploy.conftest import DEPLOY, need_tool
from tests.deploy.metric_names import known_series_names

GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "sluice.json"


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _queries() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def test_dashboard_has_the_panels_the_issue_names() -> None:
    titles = " | ".join(p["title"].lower() for p in _dashboard()["panels"])
    for wanted in (
        "rate limit vs processed rate",
        "batch processing time vs batch interval",
        "scheduling delay",
        "unallocated blocks",
        "records per batch",
        "receiver block queue depth",
    ):
        assert wanted in titles, f"no panel {wanted!r}"


def test_dashboard_uses_the_provisioned_datasource() -> None:
    uid = re.search(r"uid: (\S+)", (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())[1]
    for panel in _dashboard()["panels"]:
        assert panel["datasource"]["uid"] == uid
        assert all(t["datasource"]["uid"] == uid for t in panel["targets"])
    assert "/var/lib/grafana/dashboards" in (GRAFANA / "provisioning" / "dashboards" / "sluice.yml").read_text()


def test_dashboard_queries_use_only_known_metrics() -> None:
    used = {name for expr in _queries() for name in re.findall(r"\bsluice_[a-z0-9_]+", expr)}
    unknown = used - known_series_names()
    assert not unknown, f"the dashboard queries metrics no service exports: {sorted(unknown)}"


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule (Grafana's variables replaced by values)."""
    tool = need_tool("promtool", "Debian package prometheus")
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(_queries()):
        expr = expr.replace("$__rate_interval", "1m").replace("$batch_interval_s", "1")
        lines += [f"      - record: dashboard:query_{i}", f"        expr: {json.dumps(expr)}"]
    rules = tmp_path / "dashboard_rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    result = subprocess.run([tool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
