"""The source times its own batches: one that overran its trigger bounds the very next batch by
what it carried scaled to one interval; one that finished in time, or a trigger with no batch,
bounds nothing.  Pure, on a manual clock."""

from __future__ import annotations

from sluice.clock import ManualClock
from sluice.spark_driver.structured.batch_timer import BatchTimer
from sluice.spark_driver.structured.limits import NO_FIXED_BOUND, batch_records
from sluice.spark_driver.structured.options import Admission


def test_an_overrun_batch_bounds_the_next_by_what_fits_one_interval() -> None:
    clock = ManualClock()
    timer = BatchTimer(1000, clock)
    assert timer.overrun_bound() is None  # nothing planned yet (the first batch, a restart)
    timer.planned(1000)
    clock.advance(3200)  # 1,000 records took 3.2 s for a 1 s trigger
    assert timer.overrun_bound() == 312
    assert timer.overrun_bound() is None  # answered once: a skipped trigger is not timed from it


def test_the_batch_a_cut_bounded_is_not_timed_so_the_cut_does_not_shrink_batches_to_nothing() -> None:
    """Each batch takes the engine's 2 s whatever its records: cutting again would go 1,000, 500,
    250 ... down to one record a batch, each still 2 s."""
    clock = ManualClock()
    timer = BatchTimer(1000, clock)
    timer.planned(1000)
    clock.advance(2000)
    assert timer.overrun_bound() == 500
    timer.planned(500)  # the cut batch
    clock.advance(2000)
    assert timer.overrun_bound() is None  # not timed: the estimator has the first one's progress by now
    timer.planned(1000)
    clock.advance(2000)
    assert timer.overrun_bound() == 500  # the batch after is timed again


def test_under_available_now_an_overrun_bounds_nothing() -> None:
    clock = ManualClock()
    timer = BatchTimer(1000, clock)
    timer.available_now()
    timer.planned(1000)
    clock.advance(3200)
    assert timer.overrun_bound() is None


def test_a_batch_in_time_or_an_empty_one_bounds_nothing() -> None:
    clock = ManualClock()
    timer = BatchTimer(1000, clock)
    timer.planned(1000)
    clock.advance(1000)  # the engine asked at the next trigger: the batch fitted
    assert timer.overrun_bound() is None
    timer.planned(0)
    clock.advance(5000)
    assert timer.overrun_bound() is None


def test_the_overrun_bound_joins_the_other_bounds_with_admission_only() -> None:
    on = Admission(max_offsets_per_trigger=1000, admission=True, trigger_interval_ms=1000)
    assert batch_records(on, 1000, 5000.0, overrun=312) == 312
    assert batch_records(on, 1000, 200.0, overrun=312) == 220  # the estimator's rate is lower
    assert batch_records(on, 1000, None, streams=2, overrun=312) == 156  # shared like the fixed bound
    assert batch_records(on, None, None, overrun=312) is None  # ReadAllAvailable still wins
    off = Admission(max_offsets_per_trigger=None, admission=False, trigger_interval_ms=1000)
    assert batch_records(off, NO_FIXED_BOUND, None, overrun=312) is None


def test_the_kafka_reader_times_the_records_it_planned() -> None:
    """``sluice-kafka``: ``partitions`` starts the clock on the batch's offsets (no broker needed
    when no partition is new)."""
    from sluice.spark_driver.structured.kafka import SluiceKafkaStreamReader, to_json
    from sluice.spark_driver.structured.kafka_options import kafka_options

    clock = ManualClock()
    reader = SluiceKafkaStreamReader(
        kafka_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t", "triggerIntervalMs": "1000"}), clock
    )
    start, end = to_json({("t", 0): 100, ("t", 1): 0}), to_json({("t", 0): 700, ("t", 1): 400})
    assert len(reader.partitions(start, end)) == 2
    clock.advance(2000)
    assert reader._timer.overrun_bound() == 500  # 1,000 records in 2 s: 500 fit one second
