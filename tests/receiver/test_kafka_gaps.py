"""Gaps in a partition's fetched batches, found and waited on without a broker (the bytes are
aiokafka's own record batches)."""

from __future__ import annotations

from sluice.kafka.gaps import Gap, GapWait, first_gap, up_to
from sluice.kafka.record_batches import scan_batches
from tests.storage.test_kafka_batches import batch


def test_batches_that_run_on_have_no_gap_even_when_the_first_starts_before_the_position() -> None:
    data = batch(0, 10) + batch(10, 5)
    assert first_gap(data, 0) is None and first_gap(data, 4) is None and first_gap(data, 15) is None


def test_a_fetch_that_starts_past_the_position_has_a_gap_there() -> None:
    assert first_gap(batch(20, 5), 10) == Gap(10, 20)


def test_a_gap_between_two_batches_is_found_and_the_fetch_is_cut_before_it() -> None:
    data = batch(0, 10) + batch(30, 5) + batch(35, 5)
    assert first_gap(data, 3) == Gap(10, 30)
    kept = up_to(data, 10)
    assert [s.base_offset for s in scan_batches(kept)] == [0] and kept == batch(0, 10)
    assert up_to(data, 0) == b""


def test_records_compaction_removed_inside_a_batch_are_no_gap() -> None:
    assert first_gap(batch(0, [0, 1, 7, 9]) + batch(10, 2), 0) is None  # the batch still spans 0-9


def test_a_gap_is_taken_once_it_was_waited_on_and_a_new_position_waits_anew() -> None:
    gaps = GapWait(5.0)
    assert not gaps.due("p0", Gap(10, 20), now=100.0) and gaps.waiting()
    assert not gaps.due("p0", Gap(10, 20), now=104.9)
    assert gaps.due("p0", Gap(10, 20), now=105.0) and not gaps.waiting()
    assert not gaps.due("p0", Gap(40, 50), now=106.0)  # a later gap starts its own wait
    assert not gaps.due("p0", Gap(60, 70), now=111.5)  # ... and so does one at a position that moved
    assert gaps.due("p0", Gap(60, 70), now=116.5)


def test_without_a_wait_a_gap_is_taken_at_once_and_a_forgotten_partition_waits_no_more() -> None:
    assert GapWait(0.0).due("p0", Gap(10, 20), now=1.0)
    gaps = GapWait(5.0)
    gaps.due("p1", Gap(10, 20), now=1.0)
    gaps.forget("p1")
    assert not gaps.waiting()


def test_through_stores_up_to_a_gap_further_in_and_nothing_while_the_gap_at_the_position_waits() -> None:
    gaps = GapWait(5.0)
    data = batch(0, 10) + batch(30, 5)
    assert gaps.through("p0", data, 0, now=1.0) == (batch(0, 10), None)
    assert gaps.through("p0", batch(30, 5), 10, now=2.0) == (b"", None)
    assert gaps.through("p0", batch(30, 5), 10, now=7.0) == (batch(30, 5), Gap(10, 30))
    assert gaps.through("p0", batch(10, 5), 10, now=8.0) == (batch(10, 5), None) and not gaps.waiting()


def test_a_fetch_that_brings_nothing_past_the_position_keeps_the_wait_on_its_gap() -> None:
    """A fetch may bring a partition nothing (the response filled up with another partition's
    batches, or only a batch that ends before the position): it says nothing about the gap, so the
    wait goes on from its first sight; forgetting it there would keep a gap from ever being taken."""
    gaps = GapWait(5.0)
    assert gaps.through("p0", batch(20, 5), 10, now=100.0) == (b"", None)
    assert gaps.through("p0", b"", 10, now=103.0) == (b"", None)
    assert gaps.through("p0", batch(0, 10), 10, now=104.0) == (batch(0, 10), None)  # ends at the position
    assert gaps.waiting()
    assert gaps.through("p0", batch(20, 5), 10, now=105.0) == (batch(20, 5), Gap(10, 20))
