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
