"""A pytest plugin that records where a run's time went: ``--timings=PATH`` writes one JSON object
with the run's wall time, its workers and load, and each test's setup, call and teardown as wall
seconds and CPU seconds, with its markers and the fixtures it took.  ``scripts/test_times.py`` turns
one or more of these files into the table docs/development.md shows and the line per tier that
``make test`` prints last.

CPU is what separates waiting from work: a test that starts a JVM or a broker and waits for it shows
wall seconds with few CPU seconds.  It counts this process, its reaped children (``RUSAGE_CHILDREN``)
and its live descendants (``/proc``), so a service started in a fixture and still running is
counted by the phase it burned CPU in.  Under pytest-xdist each worker measures its own tests and
the controller, which receives every report, writes the file.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

TICK = os.sysconf("SC_CLK_TCK")
CPU_KEY = pytest.StashKey[tuple[float, float]]()


def _descendants(pid: int) -> list[int]:
    """The live descendants of ``pid``, read from each thread's ``children`` file (no /proc scan)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(children)
            todo.extend(children)
    return found


def cpu_seconds() -> tuple[float, float]:
    """``(own, others)``: CPU seconds of this process, and of its reaped children and live descendants
    (each with its own reaped children), so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    others = reaped.ru_utime + reaped.ru_stime
    for pid in _descendants(os.getpid()):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile: reaped, so in RUSAGE_CHILDREN, or a grandchild's
            continue
        others += sum(int(f) for f in fields[11:15]) / TICK  # utime, stime, cutime, cstime
    return own.ru_utime + own.ru_stime, others


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--timings", metavar="PATH", help="write each test's wall and CPU seconds per phase as JSON")
    parser.addoption("--timings-tier", metavar="NAME", default="tests", help="the tier's name in --timings' file")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _measured(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _measured(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    return (yield from _measured(item))


def _measured(item: pytest.Item) -> Iterator[None]:
    """One phase, its CPU seconds kept on the item for the report pytest makes of it next."""
    if not item.config.getoption("timings"):
        return (yield)
    own, others = cpu_seconds()
    try:
        return (yield)
    finally:
        own_after, others_after = cpu_seconds()
        item.stash[CPU_KEY] = (own_after - own, max(0.0, others_after - others))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """The phase's CPU seconds, markers and fixtures ride on the report: pytest-xdist sends a report's
    plain attributes to the controller."""
    report = yield
    if item.config.getoption("timings"):
        own, others = item.stash.get(CPU_KEY, (0.0, 0.0))
        item.stash[CPU_KEY] = (0.0, 0.0)
        vars(report).update(  # a report's extra attributes, as TestReport(**extra) takes them back
            cpu_own_s=round(own, 3),
            cpu_others_s=round(others, 3),
            markers=sorted({m.name for m in item.iter_markers()}),
            fixtures=sorted(getattr(item, "fixturenames", ())),
        )
    return report


def plain_id(nodeid: str) -> str:
    """A test's id without the ``@group`` pytest-xdist's loadgroup appends to a grouped test's
    (the suffix is after the parameters' ``]``, as pytest-xdist itself reads it): the ids the
    collection, and so ``tests/durations.json``, knows."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid


class Recorder:
    """The controller's side: every phase's report, written when the session ends."""

    def __init__(self, path: Path, tier: str) -> None:
        self.path, self.tier = path, tier
        self.started = time.monotonic()
        self.phases: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        extra = vars(report)
        if "cpu_own_s" not in extra:
            return
        test = self.phases.setdefault(
            report.nodeid,
            {"id": plain_id(report.nodeid), "markers": extra["markers"], "fixtures": extra["fixtures"], "worker": None},
        )
        test["worker"] = extra.get("worker_id")  # pytest-xdist's, on a worker's report
        test[report.when] = {
            "wall_s": round(report.duration, 3),
            "cpu_own_s": extra["cpu_own_s"],
            "cpu_others_s": extra["cpu_others_s"],
        }

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        workers = getattr(session.config.option, "numprocesses", None) or 1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "tier": self.tier,
            "wall_s": round(time.monotonic() - self.started, 1),
            "workers": workers,
            "exitstatus": int(exitstatus),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "tests": list(self.phases.values()),
        }
        self.path.write_text(json.dumps(record) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("timings")
    if path and not hasattr(config, "workerinput"):  # the controller (or a run without workers)
        config.pluginmanager.register(Recorder(Path(path), config.getoption("timings_tier")), "sluice-timings")
