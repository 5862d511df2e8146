"""The wheel holds the package as the source tree has it, and the public entry points import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_public_entry_points_import() -> None:
    from sluice.estimators import PIDRateEstimator, available, create
    from sluice.receiver import RateLimiter
    from sluice.spark_driver import StreamingDriver
    from sluice.spark_driver.direct import max_messages_per_partition
    from sluice.spark_driver.triggers import next_batch_time

    assert "pid" in available() and isinstance(create("pid", 1000), PIDRateEstimator)
    assert RateLimiter(rate=10).rate == 10 and next_batch_time(1500, 1000) == 2000
    assert callable(StreamingDriver) and callable(max_messages_per_partition)


@pytest.mark.slow
def test_every_module_imports_from_outside_the_repository(tmp_path: Path) -> None:
    """Import every module of the package from another directory: each loads under its one
    ``sluice.*`` name (a module loaded twice would also register its Prometheus collectors twice),
    and nothing needs the repository as the working directory."""
    script = """
import importlib, pkgutil, sys, sluice
names = {"sluice"}
for info in pkgutil.walk_packages(sluice.__path__, "sluice."):
    importlib.import_module(info.name)
    names.add(info.name)
bare = {"receiver", "tracker", "estimators", "spark_driver", "demo"}
stray = sorted(m for m in sys.modules if m.split(".")[0] in bare)
assert not stray, stray
print(len(names))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout) > 60  # every service, the storage layer, the demo


@pytest.mark.slow
def test_the_wheel_holds_every_module_of_the_source_tree(tmp_path: Path) -> None:
    """The wheel's modules are the source tree's, found by discovery (no hand-kept package list):
    a subpackage that imports in development but is left out of the wheel fails here."""
    repo = Path(__file__).resolve().parents[1]
    # a copy: setuptools reuses build/lib, so a module once built would stay in every later wheel
    source = tmp_path / "src"
    skip = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", "tests", "bench")
    shutil.copytree(repo, source, ignore=skip)
    wheel_args = ["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(source)]
    built = subprocess.run([sys.executable, "-m", "pip", *wheel_args], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("sluice_streaming-*.whl")
    import zipfile

    in_wheel = {n for n in zipfile.ZipFile(wheel).namelist() if n.endswith((".py", ".typed"))}
    in_tree = {
        str(p.relative_to(repo))
        for p in (repo / "sluice").rglob("*")
        if p.suffix in (".py", ".typed") and "__pycache__" not in p.parts
    }
    assert in_wheel == in_tree
    assert any(n.startswith("sluice/receiver/") for n in in_wheel) and "sluice/py.typed" in in_wheel
    # the driver's streaming page is package data: the page works from the wheel, offline
    static = {f"sluice/spark_driver/ui/static/{p.name}" for p in (repo / "sluice/spark_driver/ui/static").iterdir()}
    assert static and static <= set(zipfile.ZipFile(wheel).namelist())
