"""The page lists every configured tracker: a real leader and a real standby on one shared log
(``file://``, the same protocol as S3), and a configured tracker that is down, each as it answers."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.embedded import TrackerProcess, free_port, start_tracker, wait_until
from sluice.spark_driver.ui import UIServer
from sluice.spark_driver.ui.nodes import TrackerNodes, siblings_of
from sluice.spark_driver.ui.store import StreamingStore
from sluice.tracker.client.sync_client import SyncTrackerClient

pytestmark = pytest.mark.slow  # two real tracker processes


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[TrackerProcess, TrackerProcess]]:
    url = (tmp_path / "log").as_uri()
    leader = start_tracker(url, log=tmp_path / "leader.log")
    try:
        standby = start_tracker(url, log=tmp_path / "standby.log", args=["--standby"])
        try:
            yield leader, standby
        finally:
            standby.stop()
    finally:
        leader.stop()


def test_the_page_shows_the_leader_the_standby_and_a_tracker_that_is_down(
    pair: tuple[TrackerProcess, TrackerProcess],
) -> None:
    leader, standby = pair
    down = f"127.0.0.1:{free_port()}"
    client = SyncTrackerClient(leader.address, "driver", request_timeout=10)
    client.start()
    nodes = TrackerNodes(
        [leader.address, standby.address, down],
        client.status,
        siblings_of(lambda: client),
    )
    page = UIServer(StreamingStore(1000, tracker_status=nodes.status, status_ttl_s=0), "127.0.0.1", 0)
    try:

        def shown() -> dict[str, dict]:
            with urllib.request.urlopen(page.url + "api/v1/streaming/tracker", timeout=10) as response:
                return {n["address"]: n for n in json.load(response)["status"]["nodes"]}

        wait_until(
            lambda: shown()[standby.address]["leader"] == leader.address,
            "the standby naming the leader",
            30,
            [leader.proc, standby.proc],
        )
        by_address = shown()
        assert by_address[leader.address]["role"] == "leader" and by_address[leader.address]["reachable"]
        assert by_address[leader.address]["logPosition"] is not None
        assert by_address[standby.address]["role"] == "standby" and by_address[standby.address]["reachable"]
        assert not by_address[down]["reachable"] and by_address[down]["role"] is None
        assert by_address[down]["error"]
    finally:
        page.close()
        nodes.close()
        client.close()
