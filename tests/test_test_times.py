"""Where the suite's time goes: the timings plugin (tests/timings.py) tells waiting from work by CPU
seconds, in one process or on pytest-xdist workers, and scripts/test_times.py sums them per tier and
kind of test into the line ``make test`` prints and the table docs/development.md shows."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import longest_first
from tests.deploy.conftest import REPO
from tests.timings import plain_id

sys.path.insert(0, str(REPO / "scripts"))
import test_times


def phase(wall: float, own: float = 0.0, others: float = 0.0) -> dict:
    return {"wall_s": wall, "cpu_own_s": own, "cpu_others_s": others}


TIER = {
    "tier": "slow",
    "wall_s": 12.0,
    "workers": 4,
    "load_average": [3.5, 3.0, 2.0],
    "exitstatus": 0,
    "tests": [
        {
            "id": "tests/x.py::test_spark",
            "markers": ["slow", "spark"],
            "fixtures": ["spark"],
            "setup": phase(6.0, own=0.5, others=1.5),  # the SparkSession starting: mostly waiting
            "call": phase(2.0, own=0.2, others=2.5),  # more CPU than wall: never negative waiting
            "teardown": phase(0.1),
        },
        {
            "id": "tests/y.py::test_bench",
            "markers": ["slow", "smoke"],
            "fixtures": [],
            "setup": phase(0.0),
            "call": phase(5.0, others=1.0),
        },
    ],
}


def test_waiting_is_the_wall_time_no_cpu_spent_summed_per_tier_and_kind() -> None:
    (tier,) = test_times.summarise([TIER])
    assert (tier["tier"], tier["wall_s"], tier["workers"], tier["tests"]) == ("slow", 12.0, 4, 2)
    assert (tier["setup"], tier["call"], tier["teardown"]) == (6.0, 7.0, 0.1)
    assert tier["cpu"] == 5.7 and tier["waiting"] == 4.0 + 0.0 + 0.1 + 4.0
    kinds = {k["kind"]: k for k in tier["kinds"]}
    assert list(kinds) == ["bench smoke runs", "the shared SparkSession"]  # in KINDS' order
    assert kinds["the shared SparkSession"]["setup"] == 6.0 and kinds["the shared SparkSession"]["waiting"] == 4.1
    line = test_times.summary_line(tier)
    assert line.startswith("slow: 2 tests in 12 s on 4 workers (load 3.5)") and "waiting 8 s" in line
    rows = test_times.render([tier]).splitlines()
    assert rows[2].startswith("| **slow** (4 workers, load 3.5) | 2 | **12 s** |") and len(rows) == 5


def test_a_missing_timings_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        test_times.main(["summary", str(tmp_path / "fast.json")])
    assert exit_.value.code == 2 and f"no timings file at {tmp_path / 'fast.json'}" in capsys.readouterr().err


SAMPLE = """
import subprocess, sys, threading

BUSY = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"

def test_work_in_a_child():
    subprocess.run([sys.executable, "-c", BUSY], check=True)

def test_a_wait():
    threading.Event().wait(0.6)  # the thing measured: a wait with no work
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "2"])
def test_the_plugin_tells_a_childs_work_from_a_wait_in_one_process_or_on_workers(tmp_path: Path, workers: str) -> None:
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SAMPLE))
    out = tmp_path / "times.json"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.timings", f"--timings={out}", "--timings-tier=t", "-n", workers]
        + ["-p", "no:cacheprovider", "-q", str(tmp_path / "test_sample.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    record = json.loads(out.read_text())
    assert record["tier"] == "t" and record["workers"] == (int(workers) or 1) and record["exitstatus"] == 0
    tests = {t["id"].rsplit("::", 1)[1]: t for t in record["tests"]}
    work, wait = tests["test_work_in_a_child"]["call"], tests["test_a_wait"]["call"]
    assert work["cpu_others_s"] >= 0.5 and work["cpu_own_s"] < 0.3, work
    assert wait["wall_s"] >= 0.6 and wait["cpu_own_s"] + wait["cpu_others_s"] < 0.2, wait
    assert {t["worker"] for t in tests.values()} <= ({"gw0", "gw1"} if workers == "2" else {None})


def test_a_grouped_tests_timings_keep_the_id_the_collection_knows() -> None:
    assert plain_id("tests/a.py::test_x@timing") == "tests/a.py::test_x"
    assert plain_id("tests/a.py::test_x[p]@timing") == "tests/a.py::test_x[p]"
    assert plain_id("tests/a.py::test_x[user@host]") == "tests/a.py::test_x[user@host]"  # a parameter's own @
    assert plain_id("tests/a.py::test_x") == "tests/a.py::test_x"


def test_durations_keep_the_tests_of_a_second_or_more_by_id() -> None:
    assert test_times.durations([TIER]) == {"tests/x.py::test_spark": 8.1, "tests/y.py::test_bench": 5.0}
    short = {**TIER, "tests": [{"id": "tests/z.py::test_quick", "setup": phase(0.4), "call": phase(0.5)}]}
    assert test_times.durations([short]) == {}


class Item:
    """What the ordering reads of a pytest item: its id and its xdist group."""

    def __init__(self, nodeid: str, group: str | None = None) -> None:
        self.nodeid = nodeid
        self.group = pytest.mark.xdist_group(group).mark if group else None

    def get_closest_marker(self, name: str):
        return self.group if name == "xdist_group" else None


def test_the_longest_scope_goes_first_and_a_group_counts_as_the_sum_of_its_tests() -> None:
    items = [Item("a"), Item("b"), Item("t1", "timing"), Item("c"), Item("t2", "timing"), Item("new")]
    longest_first(items, {"a": 3.0, "b": 40.0, "c": 3.0, "t1": 20.0, "t2": 25.0})  # type: ignore[arg-type]
    # the group (45 s) before b (40 s); a and c tie and keep their order; an unknown test counts 1 s
    assert [item.nodeid for item in items] == ["t1", "t2", "b", "a", "c", "new"]
