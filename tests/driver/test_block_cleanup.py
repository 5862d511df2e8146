"""Blocks the tracker lets go are deleted even when the driver that was told dies before deleting:
the tracker forgets a cleaned batch only after a driver says its blocks are gone (real tracker
process, file store; no Spark needed, the driver's source is driven as the job scheduler does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.embedded import stop_process
from sluice.spark_driver.batch import BatchInfo
from sluice.spark_driver.receiver_source import ReceiverSource
from sluice.spark_driver.source import SourceContext
from sluice.storage.block_store import FileBlockStore
from sluice.tracker.client.sync_client import SyncTrackerClient
from tests.driver.conftest import driver_tracker
from tests.structured.conftest import put_block


def complete(source: ReceiverSource, time_ms: int) -> None:
    source.on_batch_completed(None, BatchInfo(time_ms, 1, submission_time_ms=time_ms, status="succeeded"))


@pytest.mark.slow
def test_a_driver_killed_before_deleting_leaves_the_blocks_to_the_next_driver(tmp_path: Path) -> None:
    tracker = driver_tracker(tmp_path, remember_ms=2_000)
    store = FileBlockStore(tmp_path / "blocks")
    try:
        files = {}
        with (
            SyncTrackerClient(tracker.address, "receiver") as receiver,
            SyncTrackerClient(tracker.address, "driver") as first,
        ):
            for t in (1000, 2000, 3000, 4000, 5000):
                files[t] = Path(put_block(receiver, store, [t]).location.removeprefix("file://"))
                first.allocate_blocks(t)
            first.batch_completed(BatchInfo(1000, 1, submission_time_ms=1000).to_wire())
            told = first.batch_completed(BatchInfo(4000, 1, submission_time_ms=4000).to_wire())
            assert told.through_ms == 1000  # the first driver is told to delete batch 1000's block...
        assert files[1000].exists()  # ...and dies before it does
        second = ReceiverSource(tracker.address)
        second.start(SourceContext(None, 1000))
        try:
            complete(second, 5000)
            assert not files[1000].exists(), "the block the dead driver was told about is still in the store"
            assert all(files[t].exists() for t in (2000, 3000, 4000, 5000))
            with SyncTrackerClient(tracker.address, "driver") as look:
                assert look.get_blocks_of_batch(1000) != {}  # deleted, not yet said so
                complete(second, 5000)
                assert look.get_blocks_of_batch(1000) == {}  # said so: forgotten
        finally:
            second.stop()
    finally:
        stop_process(tracker.proc)
