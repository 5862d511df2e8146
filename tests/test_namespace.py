"""Sluice installs one import namespace, ``sluice``: no generic top-level names, no module twice."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BARE = ("receiver", "tracker", "estimators", "spark_driver", "demo")


@pytest.mark.parametrize("name", BARE)
def test_bare_names_are_not_installed(tmp_path: Path, name: str) -> None:
    """Outside the repository, the top-level folders exist only as ``sluice.<name>``."""
    result = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0 and f"ModuleNotFoundError: No module named '{name}'" in result.stderr


def test_every_module_imports_once_under_sluice(tmp_path: Path) -> None:
    """Import every module of the package from outside the repository: each loads under its
    ``sluice.*`` name and no bare name sneaks in (a module loaded twice would also register its
    Prometheus collectors twice)."""
    script = f"""
import importlib, pkgutil, sys
names = set()
for top in ("sluice", *("sluice." + n for n in {BARE!r})):  # an editable install maps each folder
    package = importlib.import_module(top)
    names.add(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        importlib.import_module(info.name)
        names.add(info.name)
bare = sorted(m for m in sys.modules if m.split(".")[0] in {BARE!r})
assert not bare, bare
print(len(names))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout) > 60  # every service, the storage layer, the demo


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
def test_the_wheel_holds_every_module_of_the_source_tree(tmp_path: Path) -> None:
    """The wheel's modules are the source tree's, found by discovery (no hand-kept package list):
    a subpackage that imports in development but is left out of the wheel fails here."""
    repo = Path(__file__).resolve().parents[1]
    # a copy: setuptools reuses build/lib, so a module once built would stay in every later wheel
    source = tmp_path / "src"
    skip = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", "tests", "bench")
    shutil.copytree(repo, source, symlinks=True, ignore=skip)
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
    # rglob does not follow the links to the top-level folders: walk them too
    for name in BARE:
        in_tree |= {
            f"sluice/{p.relative_to(repo)}" for p in (repo / name).rglob("*.py") if "__pycache__" not in p.parts
        }
    assert in_wheel == in_tree
    assert any(n.startswith("sluice/receiver/") for n in in_wheel) and "sluice/py.typed" in in_wheel
    # the driver's streaming page is package data: the page works from the wheel, offline
    static = {f"sluice/spark_driver/ui/static/{p.name}" for p in (repo / "spark_driver/ui/static").iterdir()}
    assert static and static <= set(zipfile.ZipFile(wheel).namelist())
