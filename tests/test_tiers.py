"""`make test` runs every collected test exactly once: the tiers' ``-m`` expressions in the Makefile
split the suite without a gap or an overlap.  A test that no tier selects would silently never run;
one that two select would run twice and cost its minutes twice."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.deploy.conftest import REPO

TIER_LINE = re.compile(r'^(FAST|SLOW|SMOKE|ALONE)\s*:=.*? -m (?:"([^"]+)"|(\S+))', re.M)


def tier_expressions() -> dict[str, str]:
    return {name: quoted or bare for name, quoted, bare in TIER_LINE.findall((REPO / "Makefile").read_text())}


def collected(*args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return {line for line in result.stdout.splitlines() if "::" in line}


@pytest.mark.slow
def test_the_tiers_split_the_suite_with_no_gap_and_no_overlap() -> None:
    tiers = tier_expressions()
    assert set(tiers) == {"FAST", "SLOW", "SMOKE", "ALONE"}, tiers
    everything = collected()
    picked = {name: collected("-m", expression) for name, expression in tiers.items()}
    counts: dict[str, int] = {}
    for ids in picked.values():
        for test in ids:
            counts[test] = counts.get(test, 0) + 1
    assert not everything - set(counts), f"in no tier: {sorted(everything - set(counts))[:10]}"
    twice = sorted(test for test, n in counts.items() if n > 1)
    assert not twice, f"in two tiers: {twice[:10]}"
    assert all(picked.values()), {name: len(ids) for name, ids in picked.items()}  # pytest would exit 5


@pytest.mark.slow
def test_an_xdist_group_runs_on_one_worker(tmp_path) -> None:
    """The tiers run ``--dist loadgroup``: the ``timing`` tests one after another, a module's shared
    ports on one worker.  A pytest and a pytest-xdist that disagree on node ids drop every group
    without a word (pytest 9.2 and pytest-xdist 3.8 did), so a tier of the same plugins runs a
    group here and says where each test ran."""
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n\n"
        "pytestmark = pytest.mark.xdist_group('together')\n\n\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_one(i):\n"
        "    pass\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    ran = re.findall(r"^\[(gw\d+)\] .* PASSED (\S+)", result.stdout, re.M)
    assert len(ran) == 8, result.stdout[-2000:]
    assert {worker for worker, _ in ran} == {ran[0][0]}, ran  # one worker took the whole group
    assert all(test.endswith("@together") for _, test in ran), ran
