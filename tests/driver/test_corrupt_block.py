"""A corrupt block under both failure policies, with a real tracker and the real block store."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange, ReceivedBlockInfo, block_id_prefix
from sluice.records import Record
from sluice.spark_driver import StreamingDriver
from sluice.spark_driver.job_scheduler import BatchFailedError
from sluice.storage.block_store import Block, FileBlockStore
from sluice.tracker.client.sync_client import SyncTrackerClient
from tests.driver.conftest import driver_tracker

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _add_block(
    client: SyncTrackerClient, store: FileBlockStore, name: str, offsets: range, corrupt: bool = False
) -> str:
    """Store and report block ``name`` of receiver r-1 (its id in the registration's id space); its id."""
    block_id = block_id_prefix(0, "r-1", client.incarnation("r-1")) + name
    records = [Record(None, str(o).encode(), "t", 0, o, 0) for o in offsets]
    ranges = (OffsetRange("t", 0, offsets.start, offsets.stop),)
    location = store.write(Block(0, block_id, records, ranges))
    if corrupt:
        path = Path(location.removeprefix("file://"))
        data = bytearray(path.read_bytes())
        data[-3] ^= 0xFF  # inside the records: the CRC no longer matches
        path.write_bytes(bytes(data))
    client.add_block(ReceivedBlockInfo(0, block_id, "r-1", len(records), location, ranges))
    return block_id


def _receiver(address: str) -> SyncTrackerClient:
    """A started client with receiver r-1 of stream 0 registered (the tracker takes blocks of
    registered streams only)."""
    client = SyncTrackerClient(address, "receiver")
    client.start()
    client.register_receiver(0, "r-1", "h")
    return client


def _values(spark, out: Path) -> list[int]:
    if not out.exists() or not any(out.glob("batch_time=*")):
        return []
    return sorted(int(r.value) for r in spark.read.schema("value string").json(str(out)).collect())


@pytest.mark.parametrize("policy", ["stop", "skip"])
def test_corrupt_block(policy: str, spark, tracker, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path / "blocks")
    out = tmp_path / "out"
    client = _receiver(tracker.address)
    later_written = threading.Event()
    try:
        _add_block(client, store, "b-good-1", range(0, 10))
        bad = _add_block(client, store, "b-bad", range(10, 20), corrupt=True)
        added_later: list[bool] = []

        def fn(batch) -> None:
            batch.write_json(str(out))
            if any(b.block_id.endswith("-b-good-2") for b in batch.blocks):
                later_written.set()
            if policy == "skip" and not added_later and not batch.blocks:
                added_later.append(True)  # the bad batch was skipped: the stream goes on
                _add_block(client, store, "b-good-2", range(20, 30))

        driver = StreamingDriver(
            spark,
            tracker=tracker.address,
            batch_interval_ms=200,
            backpressure=False,
            max_batch_retries=1,
            on_batch_failure=policy,
        )
        driver.foreach_batch(fn).start()
        if policy == "stop":
            with pytest.raises(BatchFailedError) as failure:
                driver.await_termination(60)
            message = str(failure.value)
            failed_batch = failure.value.batch_time_ms
            assert message.startswith(f"batch {failed_batch} failed after 2 attempt(s): BlockCorruptError: block {bad}")
            assert "CRC32 mismatch" in message and "Traceback" not in message
            # Not acknowledged: a restarted driver re-runs exactly that batch first.
            assert client.status()["pending_batches"][0] == failed_batch
            assert _values(spark, out) == []
        else:
            assert later_written.wait(60)
            driver.stop()
            assert _values(spark, out) == list(range(20, 30))  # the skipped batch's good block went with it
            assert client.status()["pending_batches"] == []
    finally:
        client.close()


def test_a_refused_block_is_left_out_under_skip_and_never_deleted(spark, tmp_path: Path) -> None:
    """A block outside driver.block_store (the tracker here takes both stores) is refused on the driver:
    under skip its batch goes on with the other block, and the file outside stays where it is."""
    store = FileBlockStore(tmp_path / "blocks")
    elsewhere = FileBlockStore(tmp_path / "elsewhere")
    out = tmp_path / "out"
    tracker = driver_tracker(tmp_path, block_store=f"{store.url},{elsewhere.url}")
    client = _receiver(tracker.address)
    done = threading.Event()
    try:
        outside = _add_block(client, elsewhere, "b-outside", range(0, 10))
        _add_block(client, store, "b-inside", range(10, 20))

        def fn(batch) -> None:
            batch.write_json(str(out))
            if batch.blocks:
                done.set()

        driver = StreamingDriver(
            spark,
            tracker=tracker.address,
            batch_interval_ms=200,
            backpressure=False,
            max_batch_retries=0,
            on_batch_failure="skip",
            block_store=store.url,
        )
        driver.foreach_batch(fn).start()
        assert done.wait(60)
        driver.stop()
        assert _values(spark, out) == list(range(10, 20))
        assert (tmp_path / "elsewhere" / "stream-0" / f"{outside}.blk").exists()
    finally:
        client.close()
        tracker.stop()
