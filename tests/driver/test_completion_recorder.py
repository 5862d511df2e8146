"""A completion the tracker could not take is kept and sent again, oldest first, with the next
batch's (a tracker away through a failover or a store outage used to leave the batch allocated and
its blocks in the store until the driver restarted).  No Spark, no sockets."""

from __future__ import annotations

import logging

import pytest

from sluice.spark_driver.batch import Batch, BatchInfo
from sluice.spark_driver.completion_recorder import CompletionRecorder
from tests.driver.fakes import MemorySource


class FlakySource(MemorySource):
    """Refuses completions while ``away`` is set, as a tracker client does while it cannot reach one."""

    def __init__(self) -> None:
        super().__init__()
        self.away = False
        self.broken: set[int] = set()

    def on_batch_completed(self, batch: Batch, info: BatchInfo) -> None:
        if self.away:
            raise ConnectionError("batch_completed: no answer from the tracker within 10.0s")
        if batch.time_ms in self.broken:
            raise RuntimeError("a bug")
        super().on_batch_completed(batch, info)


def finished(t: int) -> tuple[Batch, BatchInfo]:
    return Batch(t, [], None, num_records=0), BatchInfo(t, 0, t, t, t, status="succeeded")  # type: ignore[arg-type]


def test_a_completion_that_met_no_tracker_is_sent_with_the_next_in_order(caplog: pytest.LogCaptureFixture) -> None:
    source = FlakySource()
    recorder = CompletionRecorder(source)
    recorder.record(*finished(1000))
    source.away = True
    recorder.record(*finished(2000))
    recorder.record(*finished(3000))
    assert recorder.unrecorded == [2000, 3000] and [i.batch_time_ms for i in source.completed] == [1000]
    source.away = False
    with caplog.at_level(logging.INFO):
        recorder.record(*finished(4000))
    assert recorder.unrecorded == []
    assert [i.batch_time_ms for i in source.completed] == [1000, 2000, 3000, 4000]
    assert "batch 2000: completion recorded late" in caplog.text


def test_flush_tries_once_more_and_other_failures_are_not_retried() -> None:
    source = FlakySource()
    recorder = CompletionRecorder(source)
    source.away = True
    recorder.record(*finished(1000))
    recorder.flush()
    assert recorder.unrecorded == [1000]  # still away: the next start re-runs it
    source.away = False
    recorder.flush()
    assert recorder.unrecorded == [] and [i.batch_time_ms for i in source.completed] == [1000]
    source.broken.add(2000)
    recorder.record(*finished(2000))  # logged, not kept: retrying a bug would repeat it for ever
    assert recorder.unrecorded == []
