"""The example estimator plugin installs with pip and ``estimators.create("aimd", ...)`` reaches it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.deploy.conftest import REPO

EXAMPLE = REPO / "examples" / "sluice-estimator-example"
sys.path.insert(0, str(EXAMPLE))
from sluice_estimator_example import AIMDRateEstimator, sluice_register_estimators  # noqa: E402

sys.path.remove(str(EXAMPLE))


def _can_build_offline() -> bool:
    """setuptools builds wheels by itself from 70.1 on; before that it needs the wheel package."""
    import setuptools

    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _pip_install(target: Path) -> None:
    base = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    if _can_build_offline():
        cmd = [*base, "--no-build-isolation", "--no-index", str(EXAMPLE)]
    else:  # an isolated build fetches setuptools and wheel from the package index
        cmd = [*base, str(EXAMPLE)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_installed_plugin_is_selectable_by_name(tmp_path: Path) -> None:
    target = tmp_path / "site"
    _pip_install(target)
    assert (target / "sluice_estimator_example").is_dir()
    probe = textwrap.dedent("""
        import json, estimators
        names = list(estimators.available())
        est = estimators.create("aimd", 1000, {"increase": 50.0})
        first = est.compute(1000, 5000, 500, 0)        # records the achieved rate
        second = est.compute(2000, 5000, 500, 0)       # healthy: additive increase
        third = est.compute(3000, 5000, 1500, 200)     # overran and waited: cut
        print(json.dumps({"names": names, "type": type(est).__name__, "module": type(est).__module__,
                          "rates": [first, second, third]}))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO)])}
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert "aimd" in out["names"] and "pid" in out["names"]
    assert out["module"] == "sluice_estimator_example" and out["type"] == "AIMDRateEstimator"
    first, second, third = out["rates"]
    assert first is None and second == 10_050.0
    assert third == pytest.approx(5000 / 1.5 * 0.5)  # min(rate, achieved 3333/s) halved


def test_not_installed_plugin_is_not_listed() -> None:
    """Without the distribution on the path the name is unknown (the test above is what adds it)."""
    probe = "import sys; from sluice import estimators; sys.exit('aimd' in estimators.available())"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_hook_returns_a_factory_taking_interval_and_options() -> None:
    factories = sluice_register_estimators()
    est = factories["aimd"](1000, {"increase": 100, "decrease": 0.5, "min_rate": 10})
    assert isinstance(est, AIMDRateEstimator)
    with pytest.raises(ValueError, match=r"aimd does not know the option\(s\) \['speed'\]"):
        factories["aimd"](1000, {"speed": 1})


def test_aimd_rule() -> None:
    est = AIMDRateEstimator(1000, increase=100.0, decrease=0.5, min_rate=50.0)
    assert est.compute(1000, 1000, 500, 0) is None           # first batch: 2000 rec/s achieved
    assert est.compute(1000, 1000, 500, 0) is None           # same time again: nothing new
    assert est.compute(2000, 1000, 500, 0) == 2100.0         # healthy: +100
    assert est.compute(3000, 1000, 0, 0) is None             # no processing delay: no estimate
    assert est.compute(4000, 3000, 1500, 0) == 1000.0        # overran: min(2100, 2000) * 0.5
    assert est.compute(5000, 1000, 500, 300) == 500.0        # waited: cut again
    for t in range(6000, 20000, 1000):
        est.compute(t, 10, 2000, 100)
    assert est.rate == 50.0                                  # never below min_rate


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_interval_ms": 0}, "batch_interval_ms"), ({"decrease": 1.0}, "decrease"),
    ({"increase": 0}, "increase"), ({"min_rate": 0}, "min_rate"),
])
def test_bad_settings_name_the_setting(kwargs: dict, match: str) -> None:
    args = {"batch_interval_ms": 1000, **kwargs}
    with pytest.raises(ValueError, match=match):
        AIMDRateEstimator(**args)
