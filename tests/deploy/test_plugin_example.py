"""The example plugins install with pip and Sluice reaches them by name: the estimator ``aimd``
through ``estimators.create``, the source ``file-lines`` in a real ``sluice-receiver`` process."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sluice.embedded import free_port, receiver_argv, start_service, stop_process, tracker_argv, wait_until
from sluice.tracker.client.tracker_client import TrackerClient
from tests.deploy.conftest import REPO

EXAMPLE = REPO / "examples" / "sluice-estimator-example"
SOURCE_EXAMPLE = REPO / "examples" / "sluice-source-example"
sys.path[:0] = [str(EXAMPLE), str(SOURCE_EXAMPLE)]
from sluice_estimator_example import AIMDRateEstimator, sluice_register_estimators  # noqa: E402
from sluice_source_example import FileLinesReceiver, sluice_register_sources  # noqa: E402

del sys.path[:2]


def _can_build_offline() -> bool:
    """setuptools builds wheels by itself from 70.1 on; before that it needs the wheel package."""
    import setuptools

    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _pip_install(target: Path, example: Path = EXAMPLE) -> None:
    base = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    if _can_build_offline():
        cmd = [*base, "--no-build-isolation", "--no-index", str(example)]
    else:  # an isolated build fetches setuptools and wheel from the package index
        cmd = [*base, str(example)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_installed_plugin_is_selectable_by_name(tmp_path: Path) -> None:
    target = tmp_path / "site"
    _pip_install(target)
    assert (target / "sluice_estimator_example").is_dir()
    probe = textwrap.dedent("""
        import json
        from sluice import estimators
        names = list(estimators.available())
        est = estimators.create("aimd", 1000, {"increase": 50.0})
        first = est.compute(1000, 5000, 500, 0)        # records the achieved rate
        second = est.compute(2000, 5000, 500, 0)       # healthy: additive increase
        third = est.compute(3000, 5000, 1500, 200)     # overran and waited: cut
        print(json.dumps({"names": names, "type": type(est).__name__, "module": type(est).__module__,
                          "rates": [first, second, third]}))
    """)
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert "aimd" in out["names"] and "pid" in out["names"]
    assert out["module"] == "sluice_estimator_example" and out["type"] == "AIMDRateEstimator"
    first, second, third = out["rates"]
    assert first is None and second == 10_050.0
    assert third == pytest.approx(5000 / 1.5 * 0.5)  # min(rate, achieved 3333/s) halved


@pytest.mark.slow
def test_not_installed_plugin_is_not_listed() -> None:
    """Without the distribution on the path the name is unknown (the test above is what adds it)."""
    probe = "import sys; from sluice import estimators; sys.exit('aimd' in estimators.available())"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_hook_returns_a_factory_taking_interval_and_options() -> None:
    factories = sluice_register_estimators()
    est = factories["aimd"](1000, {"increase": 100, "decrease": 0.5, "min_rate": 10})
    assert isinstance(est, AIMDRateEstimator)
    with pytest.raises(ValueError, match=r"aimd does not know the option\(s\) \['speed'\]"):
        factories["aimd"](1000, {"speed": 1})


def test_aimd_rule() -> None:
    est = AIMDRateEstimator(1000, increase=100.0, decrease=0.5, min_rate=50.0)
    assert est.compute(1000, 1000, 500, 0) is None  # first batch: 2000 rec/s achieved
    assert est.compute(1000, 1000, 500, 0) is None  # same time again: nothing new
    assert est.compute(2000, 1000, 500, 0) == 2100.0  # healthy: +100
    assert est.compute(3000, 1000, 0, 0) is None  # no processing delay: no estimate
    assert est.compute(4000, 3000, 1500, 0) == 1000.0  # overran: min(2100, 2000) * 0.5
    assert est.compute(5000, 1000, 500, 300) == 500.0  # waited: cut again
    for t in range(6000, 20000, 1000):
        est.compute(t, 10, 2000, 100)
    assert est.rate == 50.0  # never below min_rate


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"batch_interval_ms": 0}, "batch_interval_ms"),
        ({"decrease": 1.0}, "decrease"),
        ({"increase": 0}, "increase"),
        ({"min_rate": 0}, "min_rate"),
    ],
)
def test_bad_settings_name_the_setting(kwargs: dict, match: str) -> None:
    args = {"batch_interval_ms": 1000, **kwargs}
    with pytest.raises(ValueError, match=match):
        AIMDRateEstimator(**args)


async def _accepted(address: str) -> list[str]:
    """Every record the tracker accepted so far (allocated into one batch), in block order."""
    from sluice.storage import read_block

    async with TrackerClient(address, "admin") as admin:
        blocks = await admin.allocate_blocks(int(time.time() * 1000))
    return [r for stream in (blocks or {}).values() for b in stream for r in read_block(b.location).records]


@pytest.mark.slow
def test_installed_source_plugin_feeds_a_real_receiver(tmp_path: Path) -> None:
    """``--source file-lines`` with ``[receiver.source_options]``: the file's lines, then the appended
    ones, reach the tracker as records, in order, each once."""
    target = tmp_path / "site"
    _pip_install(target, SOURCE_EXAMPLE)
    lines = tmp_path / "app.log"
    lines.write_text("".join(f"line {i}\n" for i in range(500)))
    config = tmp_path / "sluice.toml"
    config.write_text(f'[receiver]\nsource = "file-lines"\n[receiver.source_options]\npath = "{lines}"\npoll_ms = 50\n')
    env = {**os.environ, "PYTHONPATH": str(target)}
    port = free_port()
    bad = subprocess.run(
        [sys.executable, *receiver_argv(f"127.0.0.1:{port}", source="file-lines")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "sluice-receiver: receiver.source = 'file-lines': file-lines needs the option path (the file to read)"
    ]
    tracker = start_service(
        tracker_argv(f"127.0.0.1:{port}", tmp_path / "wal", block_store=(tmp_path / "blocks").as_uri()),
        port=port,
        log=tmp_path / "tracker.log",
    )
    receiver = start_service(
        receiver_argv(
            f"127.0.0.1:{port}",
            source=None,  # the configuration file's
            block_store=(tmp_path / "blocks").as_uri(),
            block_interval_ms=50,
            extra=["--config", str(config)],
        ),
        env=env,
        log=tmp_path / "receiver.log",
    )
    address = f"127.0.0.1:{port}"
    seen: list[str] = []
    try:

        def collected(total: int) -> bool:
            seen.extend(asyncio.run(_accepted(address)))
            return len(seen) >= total

        wait_until(lambda: collected(500), "the file's 500 lines", 60, [tracker, receiver], tmp_path / "receiver.log")
        with lines.open("a") as fh:
            fh.write("appended 1\nappended 2\n")
        wait_until(lambda: collected(502), "the appended lines", 60, [tracker, receiver], tmp_path / "receiver.log")
    finally:
        receiver_code = stop_process(receiver)
        stop_process(tracker)  # whatever the receiver did: nothing stays behind
    assert receiver_code == 0
    assert seen == [f"line {i}" for i in range(500)] + ["appended 1", "appended 2"]


def test_source_factory_checks_its_options(tmp_path: Path) -> None:
    factory = sluice_register_sources()["file-lines"]
    receiver = factory({"path": str(tmp_path / "x.log"), "poll_ms": "20"})
    assert isinstance(receiver, FileLinesReceiver) and receiver.poll_ms == 20.0
    with pytest.raises(ValueError, match=r"file-lines does not know the option\(s\) \['speed'\]"):
        factory({"path": "x", "speed": 1})
    with pytest.raises(ValueError, match="file-lines needs the option path"):
        factory({})
    with pytest.raises(ValueError, match="poll_ms must be above 0"):
        factory({"path": "x", "poll_ms": 0})
