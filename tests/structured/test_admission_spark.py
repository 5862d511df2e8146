"""Admission control on a real query: after a capacity step it bounds the batches; a fixed
``maxOffsetsPerTrigger`` does not.

Two queries run side by side in the shared session, each over its own stream of a real tracker
holding plenty of blocks, both capped at 1,000 records per trigger.  Their batch function costs
almost nothing per record for the first batches, then 3 ms per record (capacity falls to ~330
records/s).  The fixed query keeps taking 1,000 records (3 s batches for a 1 s trigger); with the
listener feeding Spark's progress to the PID estimator, the other's batches shrink to what it can
process.  The batch function itself says when enough batches ran (an event, no polling).
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from sluice.storage.block_store import FileBlockStore
from sluice.tracker.client.sync_client import SyncTrackerClient
from tests.structured.conftest import put_block

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.alone(
        "measures a Spark pipeline's throughput or latency on two cores: other workers beside it would be measured too"
    ),
]

CAP = 1000
FAST_BATCHES = 3
SLOW_MS_PER_RECORD = 3.0
# A batch's progress reaches the listener (an asynchronous bus) after the next batch's offsets were
# fixed, as that batch starts right away when the last one overran: the rate learnt from batch N
# bounds batch N + 2 at the earliest, and batch N + 1 may still be sized from a fast batch.
LISTENER_LAG = 2
CHECKED = 3  # batches checked after the lag
SLOW_BATCHES = LISTENER_LAG + CHECKED


def start(
    spark,
    tracker: str,
    stream: int,
    options: dict,
    sizes: list[int],
    done: threading.Event,
    *,
    trigger_ms: int = 1000,
    slow_ms: float = SLOW_MS_PER_RECORD,
    batches: int = FAST_BATCHES + SLOW_BATCHES,
):
    name = f"q{uuid.uuid4().hex[:8]}"

    def process(df, batch_id: int) -> None:
        rows = df.count()
        sizes.append(rows)
        if len(sizes) > FAST_BATCHES:
            time.sleep(rows * slow_ms / 1000)  # the workload: capacity fell
        if len(sizes) >= batches:
            done.set()

    opts = {
        "tracker": tracker,
        "streams": str(stream),
        "records": "value",
        "maxOffsetsPerTrigger": str(CAP),
        "triggerIntervalMs": str(trigger_ms),
        **options,
    }
    query = (
        spark.readStream.format("sluice")
        .options(**opts)
        .load()
        .writeStream.queryName(name)
        .foreachBatch(process)
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    return name, opts, query


def fill(tracker: str, store: FileBlockStore, streams: tuple[int, ...]) -> None:
    """100 blocks of 100 records on each stream."""
    with SyncTrackerClient(tracker, "receiver") as client:
        for stream in streams:
            for i in range(100):
                put_block(client, store, [f"{stream}-{i}-{j}" for j in range(100)], stream=stream)


def test_admission_bounds_batches_after_a_capacity_step_where_a_fixed_limit_does_not(
    registered, tracker, tmp_path: Path
) -> None:
    from sluice.spark_driver.structured import admit

    spark = registered
    store = FileBlockStore(tmp_path / "blocks")
    fill(tracker.address, store, (1, 2))
    fixed_sizes: list[int] = []
    admitted_sizes: list[int] = []
    fixed_done, admitted_done = threading.Event(), threading.Event()
    listener = None
    fixed = start(spark, tracker.address, 1, {"admission": "false"}, fixed_sizes, fixed_done)[2]
    try:
        name, opts, admitted = start(spark, tracker.address, 2, {}, admitted_sizes, admitted_done)
        listener = admit(spark, query_name=name, options=opts, estimator="pid")
        try:
            assert admitted_done.wait(180) and fixed_done.wait(180)
        finally:
            admitted.stop()
    finally:
        fixed.stop()
        if listener is not None:
            listener.stop()
    after_step = admitted_sizes[FAST_BATCHES + LISTENER_LAG :]
    assert fixed_sizes[: FAST_BATCHES + SLOW_BATCHES] == [CAP] * (FAST_BATCHES + SLOW_BATCHES), fixed_sizes
    # the step's first batches: sized before any slow batch's progress reached the listener
    assert max(admitted_sizes[FAST_BATCHES : FAST_BATCHES + LISTENER_LAG]) <= CAP, admitted_sizes
    # then admission bounds every batch well below the fixed limit, near the new capacity
    assert len(after_step) >= CHECKED and max(after_step) <= CAP * 0.6, admitted_sizes
    with SyncTrackerClient(tracker.address, "admin") as client:
        rate = client.status()["rates"].get(2)
    assert rate is not None and rate < 600, rate  # published to the tracker (stream 2's receivers get it)


def test_a_batch_that_overran_its_trigger_bounds_the_very_next_one(registered, tracker, tmp_path: Path) -> None:
    """The source times its own batches: the first slow batch (sized before the step) overruns its
    trigger, and the next batch takes what fitted one trigger of it, before that batch's progress
    could reach any listener.  The estimator is a constant far above the cap, so nothing else bounds
    the batches below ``maxOffsetsPerTrigger``."""
    from sluice.spark_driver.structured import admit

    spark = registered
    fill(tracker.address, FileBlockStore(tmp_path / "blocks"), (3,))
    sizes: list[int] = []
    done = threading.Event()
    # a fast batch (ten blocks, ten PySpark tasks) fits 2 s with room on two loaded cores; a slow
    # one (4 s of work) overruns it, so what fits one trigger is below half the cap
    name, opts, query = start(
        spark, tracker.address, 3, {}, sizes, done, trigger_ms=2000, slow_ms=4.0, batches=FAST_BATCHES + 2
    )
    listener = admit(spark, query_name=name, options=opts, estimator="constant", estimator_options={"rate": 1e6})
    try:
        assert done.wait(180), sizes
    finally:
        query.stop()
        listener.stop()
    # (the query's first batch, slowed by the engine's warm-up, may cut the second once)
    assert sizes[FAST_BATCHES - 1 : FAST_BATCHES + 1] == [CAP, CAP], sizes  # the last fast one, the first slow one
    assert sizes[FAST_BATCHES + 1] <= CAP * 0.6, sizes
