"""A block that cannot be read (a valid location, no file behind it) in real processes.

Under ``on_batch_failure = "stop"`` the ``sluice-driver`` process stops on it and names the command
that skips it; ``sluice-admin skip-block`` records the skip in the tracker's log (it survives a
tracker restart here), and the restarted driver re-runs the batch without the block.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange, ReceivedBlockInfo, block_id_prefix
from sluice.embedded.processes import stop_process, wait_until
from sluice.records import Record
from sluice.storage.block_store import Block, FileBlockStore
from sluice.tracker.client.sync_client import SyncTrackerClient

from .apps import marked_records
from .conftest import driver_tracker, failing_driver

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).parents[2]


def add_blocks(address: str, store: FileBlockStore) -> str:
    """A readable block and one whose file is gone; the gone one's id."""
    with SyncTrackerClient(address, "receiver") as client:
        client.register_receiver(0, "r-1", "h")
        prefix = block_id_prefix(0, "r-1", client.incarnation("r-1"))
        for name, offsets in (("good", range(0, 10)), ("gone", range(10, 20))):
            block_id = prefix + name
            records = [Record(None, str(o).encode(), "t", 0, o, 0) for o in offsets]
            ranges = (OffsetRange("t", 0, offsets.start, offsets.stop),)
            location = store.write(Block(0, block_id, records, ranges))
            if name == "gone":
                Path(location.removeprefix("file://")).unlink()
            client.add_block(ReceivedBlockInfo(0, block_id, "r-1", len(records), location, ranges))
    return prefix + "gone"


def test_a_missing_block_stops_the_driver_with_the_skip_command_and_the_skip_lets_it_go_on(tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path / "blocks")
    tracker = driver_tracker(tmp_path)
    port = int(tracker.address.rpartition(":")[2])
    marks = tmp_path / "marks"
    args = failing_driver(tracker.address, "tests.driver.apps:write_values", store.url, 3000)
    env = {**os.environ, "SLUICE_TEST_OUT": str(tmp_path / "out"), "SLUICE_TEST_MARKS": str(marks)}
    second = None
    try:
        gone = add_blocks(tracker.address, store)
        first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
        command = f"sluice-admin skip-block --tracker {tracker.address} --stream 0 --block {gone}"
        assert first.returncode == 1, first.stderr[-3000:]
        assert f"block {gone} of stream 0 cannot be read" in first.stderr and command in first.stderr
        skip = subprocess.run(
            [sys.executable, "-m", "sluice.tracker.admin", *command.split()[1:]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert skip.returncode == 0, skip.stderr
        assert stop_process(tracker.proc) == 0  # the skip is in the log, not only in memory
        tracker = driver_tracker(tmp_path, port=port)
        with SyncTrackerClient(tracker.address, "admin") as admin:
            skipped = admin.status()["skipped_blocks"]
        assert skipped == [{"stream_id": 0, "block_id": gone, "reason": "skipped by an operator"}]
        log = open(tmp_path / "driver.log", "ab")
        second = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        wait_until(lambda: marked_records(marks) >= 10, "the re-run batch", 240, [second], tmp_path / "driver.log")
        assert stop_process(second, timeout=120) == 0
        assert marked_records(marks) == 10
    finally:
        if second is not None and second.poll() is None:
            stop_process(second)
        stop_process(tracker.proc)
