"""One ``sluice`` query from a Spark Connect client, in its own process, against a Connect server the
fixture starts from the pyspark package.  Connect clients have no RDDs: the Data Source is the way in."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from sluice.embedded import start_service, stop_process, wait_until
from sluice.storage.block_store import FileBlockStore
from sluice.tracker.client.sync_client import SyncTrackerClient
from tests.structured.conftest import put_block
from tests.structured.test_exactly_once import assert_once, values

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_sluice_query_runs_from_a_spark_connect_client(connect_server, tracker, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path / "blocks")
    expected = {f"c{i}-{j}" for i in range(10) for j in range(50)}
    with SyncTrackerClient(tracker.address, "receiver") as client:
        for i in range(10):
            put_block(client, store, [f"c{i}-{j}" for j in range(50)])
    out, log = tmp_path / "out", tmp_path / "client.log"
    options = {"tracker": tracker.address, "records": "value", "maxOffsetsPerTrigger": "200"}
    env = {"PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    client_proc = start_service(
        [
            "-m",
            "tests.structured.apps",
            "sluice",
            json.dumps(options),
            str(tmp_path / "checkpoint"),
            str(out),
            connect_server.url,
        ],
        env=env,
        log=log,
    )
    try:
        wait_until(
            lambda: len(values(out)) >= len(expected),
            "every record written",
            180,
            [client_proc, connect_server.proc],
            log,
        )
    finally:
        stop_process(client_proc)
    assert_once(values(out), expected)
    assert len(list(out.glob("batch_time=*"))) >= 3  # bounded batches: 200 records of 500 each
