"""The benchmarks run from a fresh checkout as documented and end with one JSON line of figures."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tests.deploy.conftest import REPO

BENCH = REPO / "bench"


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_a_benchmark_imports_only_sluice_and_the_harness(path) -> None:
    """No test module, no ``sys.path`` patching: Sluice is installed and ``bench/`` is the script's folder."""
    tree = ast.parse(path.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert "tests" not in imported
    assert "sys.path" not in path.read_text()


def test_a_benchmark_prints_its_figures_as_a_last_json_line() -> None:
    result = subprocess.run([sys.executable, str(BENCH / "estimators.py"), "--iterations", "200", "--repeat", "1"],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "estimators" and {"pid.compute", "adaptive.compute"} <= set(figures["us_per_call"])
