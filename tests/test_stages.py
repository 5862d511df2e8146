"""Where a record's time goes: stamps in, per-stage durations out, without sockets or Spark.

A block carries its first and last pieces' broker, fetch and admission times and its own cut,
store and tracker times; a batch its driver stamps.  ``stage_samples`` must give each of the two
records its own early stages and the shared later ones, skip what a block does not carry (an older
receiver's), and the tracker's schema must refuse stamps the driver could not subtract.
"""

from __future__ import annotations

import pytest

from sluice.block_info import InvalidMessage, ReceivedBlockInfo
from sluice.stages import (
    STAGE_NAMES,
    STAMPS,
    TRACKED,
    BatchStamps,
    PieceStamps,
    stage_percentiles,
    stage_samples,
    stamped,
)
from sluice.tracker.wire.schema import Block

T = 1_700_000_000_000  # any wall-clock time


def block_stamps() -> dict:
    pieces = PieceStamps()
    pieces.add(fetch=T + 10, admit=T + 15, oldest=T, newest=T + 5)  # first piece
    pieces.add(fetch=T + 150, admit=T + 150, oldest=T + 120, newest=T + 140)  # last piece
    return {**pieces.block_stamps(cut=T + 200), "stored": T + 230, TRACKED: T + 240}


def batch_stamps(sink_end: int | None = T + 1600) -> BatchStamps:
    return BatchStamps(
        tick=T + 1000,
        allocated=T + 1020,
        submitted=T + 1100,
        started=T + 1110,
        task_start=T + 1300,
        sink_end=sink_end,
        function_end=T + 1650,
    )


def test_each_record_gets_its_own_early_stages_and_the_blocks_and_batchs_shared_ones() -> None:
    samples = stage_samples([{STAMPS: block_stamps()}], batch_stamps())
    # [first record, last record]: the first piece's oldest record, the last piece's newest
    assert samples["broker"] == [10, 10]
    assert samples["limiter"] == [5, 0]
    assert samples["buffer"] == [185, 50]
    assert samples["store"] == [30, 30]
    assert samples["report"] == [10, 10]
    assert samples["allocation_wait"] == [760, 760]
    assert samples["allocate"] == [20, 20]
    assert samples["submit"] == [80, 80]
    assert samples["queue"] == [10, 10]
    assert samples["launch"] == [190, 190]
    assert samples["task"] == [300, 300]
    assert samples["finish"] == [50, 50]
    assert samples["total"] == [1650, 1510]
    for which in (0, 1):  # the stages add up to the record's whole way
        assert sum(samples[name][which] for name in STAGE_NAMES) == samples["total"][which]


def test_without_a_sink_the_task_stage_runs_to_the_functions_end() -> None:
    samples = stage_samples([{STAMPS: block_stamps()}], batch_stamps(sink_end=None))
    assert samples["task"] == [350, 350] and samples["finish"] == [0, 0]


def test_blocks_without_stamps_give_no_samples_and_missing_stamps_skip_their_stages() -> None:
    assert not any(stage_samples([None, {}, {"oldest_ts_ms": T}], batch_stamps()).values())
    no_kafka = block_stamps()
    del no_kafka["append"]  # a socket receiver's records have no Kafka timestamp
    samples = stage_samples([{STAMPS: no_kafka}], BatchStamps(tick=T + 1000))
    assert samples["broker"] == [] and samples["total"] == []
    assert samples["allocation_wait"] == [760, 760] and samples["allocate"] == []


def test_percentiles_name_only_the_stages_with_samples() -> None:
    out = stage_percentiles({"buffer": [10, 20, 30, 40], "store": []})
    assert out == {"buffer": {"p50": 30.0, "p99": 40.0}}


def block(metadata: dict) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(0, "input-0-r-1-1000", "r", 1, "file:///b/input-0-r-1-1000.blk", (), metadata)


def test_the_tracker_stamps_only_blocks_that_carry_stamps() -> None:
    old = block({"oldest_ts_ms": T})
    assert stamped(old, TRACKED, T + 5) is old
    new = stamped(block({STAMPS: {"cut": T}}), TRACKED, T + 5)
    assert new.metadata[STAMPS] == {"cut": T, TRACKED: T + 5}


def test_the_schema_takes_stamps_of_milliseconds_and_refuses_others() -> None:
    check = Block().check
    good = block({STAMPS: block_stamps()}).to_wire()
    checked = check(good, "block")
    assert isinstance(checked, ReceivedBlockInfo) and checked.metadata[STAMPS] == block_stamps()
    check(block({}).to_wire(), "block")  # an older receiver's block: no stamps at all
    for bad in ("soon", {"cut": "soon"}, {"fetch": [T, "x"]}, {"cut": 10**15}, {"cut": True}):
        with pytest.raises(InvalidMessage, match=r"block\.metadata\.stamps"):
            check(block({STAMPS: bad}).to_wire(), "block")
