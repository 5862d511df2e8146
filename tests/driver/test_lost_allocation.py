"""A lost ``allocate_blocks`` reply is not a lost batch: the tracker allocated it (and never
allocates a batch time twice), so the driver runs it at the next tick instead of leaving its blocks
allocated and pending until a restart. The fault is the one a network gives: the request reaches a
real tracker, the reply never comes back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.block_info import OffsetRange, ReceivedBlockInfo, block_id_prefix
from sluice.embedded import TrackerProcess
from sluice.records import Record
from sluice.spark_driver.receiver_source import ReceiverSource
from sluice.spark_driver.source import SourceContext
from sluice.storage.block_store import Block, FileBlockStore
from sluice.tracker.client.connection import TrackerUnavailable
from sluice.tracker.client.sync_client import SyncTrackerClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]


class ReplyLost(SyncTrackerClient):
    """A real client whose chosen ``allocate_blocks`` reaches the tracker and whose reply is lost."""

    lose: set[int] = set()

    def allocate_blocks(self, batch_time_ms: int, max_records: Any = None) -> Any:
        answer = super().allocate_blocks(batch_time_ms, max_records)
        if batch_time_ms in self.lose:
            raise TrackerUnavailable(f"allocate_blocks: no answer from the tracker at {self._address} (lost)")
        return answer


def add_blocks(address: str, store: FileBlockStore, first: int, count: int) -> None:
    with SyncTrackerClient(address, "receiver") as client:
        client.register_receiver(0, "r-1", "h")
        prefix = block_id_prefix(0, "r-1", client.incarnation("r-1"))
        for i in range(first, first + count):
            records = [Record(None, b"%d" % i, "t", 0, i, 0)]
            ranges = (OffsetRange("t", 0, i, i + 1),)
            location = store.write(Block(0, f"{prefix}{i}", records, ranges))
            client.add_block(ReceivedBlockInfo(0, f"{prefix}{i}", "r-1", 1, location, ranges))


def test_a_batch_whose_allocation_reply_was_lost_runs_at_the_next_tick(
    spark: Any, tracker: TrackerProcess, tmp_path: Path
) -> None:
    store = FileBlockStore(tmp_path / "blocks")
    source = ReceiverSource(tracker.address, block_store=store.url, client_factory=ReplyLost)
    source.start(SourceContext(spark, 1000, (0,)))
    try:
        add_blocks(tracker.address, store, 0, 3)
        ReplyLost.lose = {1_000}
        with pytest.raises(ConnectionError):
            source.create_batch(1_000, None)  # allocated by the tracker; the answer never came
        add_blocks(tracker.address, store, 3, 2)
        late = source.create_batch(2_000, None)
        assert late is not None and late.time_ms == 1_000  # the lost batch, with its own blocks
        assert sorted(late.rdd.map(lambda r: r.value).collect()) == [b"0", b"1", b"2"]
        after = source.create_batch(3_000, None)  # what arrived meanwhile goes into the next tick
        assert after is not None and after.time_ms == 3_000
        assert sorted(after.rdd.map(lambda r: r.value).collect()) == [b"3", b"4"]
    finally:
        ReplyLost.lose = set()
        source.stop()


def test_a_lost_request_the_tracker_never_saw_costs_nothing(
    spark: Any, tracker: TrackerProcess, tmp_path: Path
) -> None:
    store = FileBlockStore(tmp_path / "blocks")
    source = ReceiverSource(tracker.address, block_store=store.url, client_factory=ReplyLost)
    source.start(SourceContext(spark, 1000, (0,)))
    try:
        add_blocks(tracker.address, store, 0, 2)
        source._unanswered = 500  # a request that never reached the tracker: nothing was allocated
        batch = source.create_batch(2_000, None)
        assert batch is not None and batch.time_ms == 2_000
        assert sorted(batch.rdd.map(lambda r: r.value).collect()) == [b"0", b"1"]
    finally:
        source.stop()
