"""Record counts are a receiver's claim: blocks whose counts sum past 2**63 - 1 still complete."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sluice.block_info import MAX_INT, OffsetRange, ReceivedBlockInfo, block_id_prefix
from sluice.embedded.processes import wait_until
from sluice.records import Record
from sluice.spark_driver import StreamingDriver
from sluice.storage.block_store import Block, FileBlockStore
from sluice.tracker.client.sync_client import SyncTrackerClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_batch_whose_record_counts_sum_past_the_int64_range_completes(spark, tracker, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path / "blocks")
    seen = threading.Event()
    with SyncTrackerClient(tracker.address, "receiver") as client:
        # one block per stream: a stream's queue holds at most tracker.max_queued_records, so only
        # a batch of several streams can sum past the range
        for stream in range(2):
            receiver = f"r-{stream}"
            client.register_receiver(stream, receiver, "h")
            block_id = block_id_prefix(stream, receiver, client.incarnation(receiver)) + "0"
            records = [Record(None, b"%d" % stream, "t", stream, 0, 0)]
            ranges = (OffsetRange("t", stream, 0, 1),)
            location = store.write(Block(stream, block_id, records, ranges))
            client.add_block(ReceivedBlockInfo(stream, block_id, receiver, 2**62 + 1, location, ranges))
        driver = StreamingDriver(
            spark,
            tracker=tracker.address,
            streams=(0, 1),
            batch_interval_ms=200,
            backpressure=False,
            block_store=store.url,
        )
        counts: list[int] = []

        def fn(batch) -> None:
            if batch.blocks:
                counts.append(batch.num_records)
                seen.set()

        driver.foreach_batch(fn).start()
        try:
            assert seen.wait(120)
            wait_until(lambda: not client.status()["pending_batches"], "the completion recorded", 60)
        finally:
            driver.stop()
    assert counts == [MAX_INT]
