"""A three-minute fault campaign on real processes, each service on a host of its own: nothing the
topic holds is lost or written twice, and the pipeline recovers soon after each fault heals.

The seed is fixed, so the schedule is the same in every run (it is printed first): seed 57's three
minutes hold 19 faults of all seven kinds in three bursts, the tracker leader, its standby and the
driver killed among them.  The campaign runs as ``bench/chaos.py --seed 57 --minutes 3`` does,
through that script, so this is also the bench's smoke run: its JSON line is what is checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.testing.netns import remove_leftovers
from tests.deploy.conftest import REPO

pytestmark = [pytest.mark.slow]

SEED = 57
# The aim is 30 s.  A killed driver is a new Spark application (executors started again, their
# Python workers cold) that re-runs every batch allocated before the kill: about 45 s on a quiet
# two-core machine (docs/operations/chaos.md), far more on a shared one.  The bound catches a
# pipeline that does not come back at all.
RECOVERY_P99_S = 300


@pytest.mark.timeout(1800)  # services start on eleven hosts, then the campaign and the drain
def test_three_minutes_of_faults_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "chaos.py"),
            "--seed",
            str(SEED),
            "--minutes",
            "3",
            "--keep",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=1700,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (result,) = [json.loads(line) for line in run.stdout.splitlines()]
    print(result)
    assert result["bench"] == "chaos" and result["min"] <= result["median"] <= result["max"], result
    assert result["records"] > 5_000
    assert result["lost"] == 0 and result["duplicated"] == 0, result
    assert result["order_violations"] == 0 and result["beyond_end"] == 0, result
    assert result["blocks_left"] == 0, result
    assert result["bursts"] >= 2 and result["recoveries"] >= result["bursts"] - 1, result
    assert result["recovery_p99_s"] <= RECOVERY_P99_S, result
    assert not remove_leftovers()  # the campaign removed its namespaces itself
