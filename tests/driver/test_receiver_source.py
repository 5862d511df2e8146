"""ReceiverSource: the per-stream batch bound (the rate in force for one interval, plus the headroom),
batches built from the allocation's columns, and the hello it says before Spark starts."""

from __future__ import annotations

import msgpack
import pytest

from sluice.block_columns import BlockColumns
from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.clock import ManualClock
from sluice.embedded import free_port, start_tracker, stop_process
from sluice.spark_driver.block_rdd import MIN_SLICE_RECORDS
from sluice.spark_driver.job_scheduler import JobScheduler
from sluice.spark_driver.receiver_source import BATCH_HEADROOM, ReceiverSource
from sluice.spark_driver.source import SourceContext
from sluice.storage.block_store import Block, FileBlockStore
from sluice.tracker.client.connection import TrackerAuthError
from sluice.tracker.wire.allocation_reply import decode_allocation, encode_columns
from tests.driver.fakes import MemorySource


def bound(
    trigger: str = "fixed",
    rates: dict[int, float | None] | None = None,
    interval_ms: int = 500,
    streams: tuple[int, ...] = (0, 1),
) -> dict[int, int] | None:
    source = ReceiverSource("127.0.0.1:1")
    rates = rates or {}
    source.context = SourceContext(None, interval_ms, streams, trigger=trigger, current_rate=rates.get)
    return source.max_records()


def test_each_stream_is_bounded_by_its_own_rate_for_one_interval_plus_headroom() -> None:
    assert BATCH_HEADROOM == 0.1
    assert bound(rates={0: 5000.0, 1: 200.0}) == {0: 2750, 1: 110}  # rate x 0.5 s x 1.1
    assert bound(rates={0: 5000.0}) == {0: 2750}  # stream 1 has no rate: unbounded
    assert bound(rates={0: 0.5}) == {0: 1}  # never 0: at least a record


def test_no_bound_without_a_rate_or_under_once() -> None:
    assert bound(rates={}) is None  # backpressure off, no initial rate
    assert bound(trigger="once", rates={0: 5000.0}) is None  # once: one batch of everything
    assert bound(trigger="available-now", rates={0: 5000.0}) == {0: 2750}


def test_a_batch_is_built_from_the_allocation_columns_and_its_info_carries_no_ranges(spark, tmp_path) -> None:
    """The driver reads record counts, locations and ranges from the allocation's columns: the block
    RDD reads every record, no block object is built on the way, and the batch's ``BatchInfo`` does
    not send the ranges back (the tracker logged them with the allocation, as Spark's receiver input
    reports none)."""
    store = FileBlockStore(tmp_path / "store")
    allocation = {}
    for stream in (1, 0):
        infos = []
        for i in range(3):
            ranges = (OffsetRange("t", stream, 2 * i, 2 * i + 2),)
            records = [f"{stream}-{i}-{k}" for k in range(2)]
            location = store.write(Block(stream, f"b{stream}-{i}", records, ranges))
            infos.append(ReceivedBlockInfo(stream, f"b{stream}-{i}", "r0", 2, location, ranges))
        allocation[stream] = infos
    wire = encode_columns(list(allocation), [BlockColumns(infos) for infos in allocation.values()])
    decoded = decode_allocation(msgpack.unpackb(msgpack.packb(wire), strict_map_key=False))
    source = ReceiverSource("127.0.0.1:1", block_store=store.url)
    source.context = SourceContext(spark, 1000, (0, 1))

    batch = source._batch(5_000, decoded)
    assert batch.num_records == 12 and batch.stream_records == {0: 6, 1: 6}
    assert sorted(batch.rdd.collect()) == sorted(f"{s}-{i}-{k}" for s in (0, 1) for i in range(3) for k in range(2))
    assert len(batch.blocks) == 6 and len(batch.offset_ranges) == 6
    scheduler = JobScheduler(lambda batch: None, MemorySource(), clock=ManualClock(5_000))
    try:
        info = scheduler.submit(batch).info
    finally:
        scheduler.stop(graceful=True, timeout=10)
    assert info.offset_ranges == () and info.to_wire()["offset_ranges"] == []
    assert isinstance(batch.blocks, BlockColumns) and batch.blocks._blocks is None  # no block object built so far
    assert list(batch.blocks) == allocation[0] + allocation[1]  # streams in order; built when asked
    assert list(batch.offset_ranges) == [b.offset_ranges[0] for b in allocation[0] + allocation[1]]


def test_a_batch_of_one_large_block_runs_on_every_core_of_the_context_by_default(spark, tmp_path) -> None:
    """``driver.min_batch_partitions`` 0 is the context's default parallelism (``local[2]``: 2); 1
    keeps Spark's one partition per block."""
    store = FileBlockStore(tmp_path / "store")
    n = 2 * MIN_SLICE_RECORDS
    location = store.write(Block(0, "big", list(range(n))))
    allocation = {0: BlockColumns([ReceivedBlockInfo(0, "big", "r0", n, location)])}
    partitions = {}
    for setting in (0, 1):
        source = ReceiverSource("127.0.0.1:1", block_store=store.url, min_partitions=setting)
        source.context = SourceContext(spark, 1000, (0,))
        rdd = source._batch(5_000, allocation).rdd
        partitions[setting] = rdd.getNumPartitions()
        assert sorted(rdd.collect()) == list(range(n))
    assert spark.sparkContext.defaultParallelism == 2
    assert partitions == {0: 2, 1: 1}


def test_a_batch_reports_each_stage_of_its_records_way_with_its_first_tasks_start(spark, tmp_path) -> None:
    """The stamps a block carries (sluice.stages) and the driver's own give the batch's per-stage
    p50/p99: its first task's start noted inside the task, the sink's end by write_json, each sample
    observed in sluice_batch_stage_seconds."""
    from sluice.spark_driver.metrics import BATCH_STAGE
    from sluice.stages import STAMPS, now_ms

    store = FileBlockStore(tmp_path / "store")
    location = store.write(Block(0, "b0", ["a", "b"]))
    t = now_ms()
    stamps = {"fetch": [t - 300, t - 250], "admit": [t - 300, t - 250], "cut": t - 200, "stored": t - 190}
    source = ReceiverSource("127.0.0.1:1", block_store=store.url)
    source.context = SourceContext(spark, 1000, (0,))
    batch = source._batch(t, {0: BlockColumns([ReceivedBlockInfo(0, "b0", "r0", 2, location, (), {STAMPS: stamps})])})
    tasks_before = BATCH_STAGE.labels("task")._sum.get()
    scheduler = JobScheduler(lambda b: b.write_json(str(tmp_path / "out")), MemorySource(), clock=ManualClock(t))
    try:
        handle = scheduler.submit(batch)
        assert handle.done.wait(300)  # a loaded machine's job can take a minute
    finally:
        scheduler.stop(graceful=True, timeout=10)
    s = batch.stamps
    assert s.submitted <= s.started <= s.task_start <= s.sink_end <= s.function_end
    stages = handle.info.stages
    assert stages["buffer"] == {"p50": 100.0, "p99": 100.0} and stages["store"] == {"p50": 10.0, "p99": 10.0}
    assert stages["launch"]["p50"] == s.task_start - s.started
    assert stages["finish"]["p50"] == s.function_end - s.sink_end
    assert "allocation_wait" not in stages  # no tracker stamp, no tick: not made up
    assert handle.info.to_wire()["stages"] == stages
    assert BATCH_STAGE.labels("task")._sum.get() > tasks_before


@pytest.mark.slow
def test_the_preflight_refuses_a_wrong_credential_and_leaves_an_unreachable_tracker_to_start(tmp_path) -> None:
    """``sluice-driver`` says hello before Spark starts: a refused token fails it there; a tracker not
    reached lets it go on to the start, which waits for the tracker as always."""
    (tmp_path / "token").write_text("right")
    config = tmp_path / "tracker.toml"
    config.write_text(f'[tracker]\ndriver_token_file = "{tmp_path}/token"\n')
    tracker = start_tracker(tmp_path / "wal", args=["--config", str(config), "--no-fsync"])
    try:
        ReceiverSource(tracker.address, auth_token="right").preflight({}, 1000)
        with pytest.raises(TrackerAuthError, match="got a wrong auth token"):
            ReceiverSource(tracker.address, auth_token="wrong").preflight({}, 1000)
    finally:
        stop_process(tracker.proc)
    ReceiverSource(f"127.0.0.1:{free_port()}").preflight({}, 1000)  # returns: nothing listens there
