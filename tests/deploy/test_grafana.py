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


# Grafana publishes the Classic dashboard model as CUE, not JSON Schema: kinds/dashboard/dashboard_kind.cue
# in grafana/grafana (and no cue tool is a Debian package). These are that schema's constraints on what
# the dashboard uses: a field's type where it is set, the required panel ``type``, the grid's bounds.
PANEL_TYPES = {"timeseries", "stat", "gauge", "bargauge", "table", "heatmap", "text", "row", "graph", "piechart"}


def _check_datasource(ref: object, where: str) -> None:
    assert isinstance(ref, dict) and set(ref) <= {"type", "uid"}, f"{where}: datasource is a DataSourceRef"
    assert all(isinstance(v, str) for v in ref.values()), f"{where}: datasource type and uid are strings"


def _check_panel(panel: dict, where: str) -> None:
    assert isinstance(panel.get("type"), str) and panel["type"], f"{where}: type is a non-empty string"
    assert panel["type"] in PANEL_TYPES, f"{where}: {panel['type']!r} is not a panel plugin Grafana ships"
    assert isinstance(panel.get("id"), int) and 0 <= panel["id"] < 2**32, f"{where}: id is a uint32"
    grid = panel["gridPos"]
    assert all(isinstance(grid[k], int) for k in "hwxy"), f"{where}: gridPos h, w, x, y are integers"
    assert grid["h"] > 0 and 0 < grid["w"] <= 24 and 0 <= grid["x"] < 24 and grid["y"] >= 0, f"{where}: {grid}"
    assert grid["x"] + grid["w"] <= 24, f"{where}: the panel runs past the grid's 24 columns"
    for name in ("title", "description", "interval"):
        assert isinstance(panel.get(name, ""), str), f"{where}: {name} is a string"
    _check_datasource(panel.get("datasource", {}), where)
    assert isinstance(panel.get("options", {}), dict), f"{where}: options is an object"
    config = panel.get("fieldConfig", {"defaults": {}, "overrides": []})
    assert isinstance(config.get("defaults"), dict) and isinstance(config.get("overrides", []), list), where
    thresholds = config["defaults"].get("thresholds")
    if thresholds is not None:
        assert thresholds["mode"] in ("absolute", "percentage"), f"{where}: thresholds mode"
        assert all(isinstance(s["color"], str) for s in thresholds["steps"]), f"{where}: each step has a color"
    targets = panel.get("targets", [])
    assert isinstance(targets, list) and all(isinstance(t, dict) for t in targets), f"{where}: targets"
    ref_ids = [t.get("refId") for t in targets]
    assert len(set(ref_ids)) == len(ref_ids), f"{where}: refIds repeat: {ref_ids}"
    for target in targets:
        _check_datasource(target.get("datasource", {}), where)


def test_dashboard_follows_grafanas_classic_dashboard_schema() -> None:
    board = _dashboard()
    assert isinstance(board["schemaVersion"], int) and 0 < board["schemaVersion"] < 2**16
    for name in ("uid", "title", "description", "timezone"):
        assert isinstance(board.get(name, ""), str), f"{name} is a string"
    assert 0 < len(board["uid"]) <= 40, "uid: at most 40 characters"
    assert board.get("graphTooltip", 0) in (0, 1, 2)
    assert board.get("style", "dark") in ("light", "dark")
    assert isinstance(board.get("editable", True), bool)
    assert all(isinstance(board["time"][k], str) for k in ("from", "to"))
    assert isinstance(board.get("refresh", ""), str | bool)
    assert all(isinstance(tag, str) for tag in board.get("tags", []))
    for variable in board.get("templating", {}).get("list", []):
        assert isinstance(variable["name"], str) and variable["name"]
        assert variable["type"] in ("query", "adhoc", "constant", "datasource", "interval", "textbox", "custom")
    assert isinstance(board.get("annotations", {}).get("list", []), list)
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids), f"panel ids repeat: {ids}"
    cells: set[tuple[int, int]] = set()
    for i, panel in enumerate(board["panels"]):
        where = f"panel {i} ({panel.get('title')!r})"
        _check_panel(panel, where)
        grid = panel["gridPos"]
        area = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"{where} overlaps another panel"
        cells |= area


def test_every_panel_query_names_a_metric_a_service_exports() -> None:
    """Each query reads ``sluice_*`` series the services' registries export, or is a constant reference
    line (``vector`` of a number or a dashboard variable); a query of unknown names draws nothing."""
    known = known_series_names()
    for panel in _dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr, where = target["expr"], f"{panel['title']!r} {target['refId']}"
            used = set(re.findall(r"\bsluice_[a-z0-9_]+", expr))
            assert used <= known, f"{where}: {sorted(used - known)} are exported by no service"
            assert used or re.fullmatch(r"vector\((\$\w+|[\d.]+)\)", expr.strip()), f"{where} reads no metric: {expr}"
