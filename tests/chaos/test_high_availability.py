"""The tracker outlives its host, on the whole Kafka pipeline: moto, tansu storing its topic on it,
a leader and a standby tracker sharing a log there, two Kafka receivers, Spark standalone and
``sluice-driver``, each on a host of its own.  One scenario, fault after fault, each healed before
the next: the leader's host lost (SIGKILL, working directory deleted), the new leader paused past
its lease and resumed (a zombie: fenced, it exits), the store unreachable for 10 s, the broker
restarted.  A tracker that exits comes back as a standby, as a supervisor deploys it.  Every one of
more than 50,000 records comes out exactly once, in order per partition, and no block is left.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.testing.chaos_campaign import run_campaign
from sluice.testing.chaos_cluster import standby_supported
from sluice.testing.chaos_nemesis import Fault
from sluice.testing.netns import remove_leftovers

pytestmark = [pytest.mark.slow]

SECONDS = 170
RATE = 320  # records/s: 54,400 over the run
FAULTS = [
    Fault(15, "kill", "tracker", 12, wipe=True),  # host loss: tracker2 takes over, tracker comes back as standby
    Fault(50, "pause", "tracker2", 20),  # past the lease: tracker takes over; tracker2, resumed, is fenced
    Fault(95, "store_down", "store", 10),
    Fault(130, "broker_restart", "broker", 3),
]


@pytest.mark.timeout(1800)
def test_host_loss_a_zombie_leader_a_store_outage_and_a_broker_restart_lose_nothing(tmp_path: Path) -> None:
    assert standby_supported()
    result = run_campaign(tmp_path, 0, SECONDS, rate=RATE, faults=FAULTS)
    print(result)
    assert result["records"] > 50_000, result
    assert result["lost"] == 0 and result["duplicated"] == 0 and result["order_violations"] == 0, result
    assert result["drained_in_time"] and result["blocks_left"] == 0, result
    # each tracker exited once (killed; fenced on resuming) and came back as a standby: no other
    # takeover (the store outage costs none: the leader's lease requests are bounded well below the
    # lease), no leader deposing the one that serves (that flip-flop restarted them 4 and 2 times)
    assert result["restarts"].get("tracker") == 1 and result["restarts"].get("tracker2") == 1, result
    assert not remove_leftovers()
