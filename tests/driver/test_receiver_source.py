"""ReceiverSource's per-stream batch bound: the rate in force for one interval, plus the headroom."""

from __future__ import annotations

from sluice.spark_driver.receiver_source import BATCH_HEADROOM, ReceiverSource
from sluice.spark_driver.source import SourceContext


def bound(trigger: str = "fixed", rates: dict[int, float | None] | None = None, interval_ms: int = 500,
          streams: tuple[int, ...] = (0, 1)) -> dict[int, int] | None:
    source = ReceiverSource("127.0.0.1:1")
    rates = rates or {}
    source.context = SourceContext(None, interval_ms, streams, trigger=trigger, current_rate=rates.get)
    return source.max_records()


def test_each_stream_is_bounded_by_its_own_rate_for_one_interval_plus_headroom() -> None:
    assert BATCH_HEADROOM == 0.1
    assert bound(rates={0: 5000.0, 1: 200.0}) == {0: 2750, 1: 110}   # rate x 0.5 s x 1.1
    assert bound(rates={0: 5000.0}) == {0: 2750}                     # stream 1 has no rate: unbounded
    assert bound(rates={0: 0.5}) == {0: 1}                           # never 0: at least a record


def test_no_bound_without_a_rate_or_under_once() -> None:
    assert bound(rates={}) is None                                   # backpressure off, no initial rate
    assert bound(trigger="once", rates={0: 5000.0}) is None          # once: one batch of everything
    assert bound(trigger="available-now", rates={0: 5000.0}) == {0: 2750}
