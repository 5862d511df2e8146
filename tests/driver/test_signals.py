"""In-flight signals: the sampler on a manual clock, its one thread, and what it never blocks."""

from __future__ import annotations

import threading
import uuid

import pytest

from sluice.clock import ManualClock
from sluice.estimators import PIDRateEstimator, RateController
from sluice.estimators.base import InFlight, QueuedBatch, RunningBatch
from sluice.spark_driver.batch import Batch, BatchInfo
from sluice.spark_driver.job_scheduler import JobScheduler
from sluice.spark_driver.rate_loop import RateLoop
from sluice.spark_driver.signals import InFlightSampler, in_flight

from .fakes import MemorySource

INTERVAL = 200


class Observing:
    """Answers ``compute`` with 500 and each ``observe`` with the next scripted rate."""

    def __init__(self, *answers: float | None) -> None:
        self.answers = list(answers)
        self.signals: list[InFlight] = []
        self.seen = threading.Semaphore(0)

    def compute(self, time_ms, elements, processing_delay_ms, scheduling_delay_ms):
        return 500.0

    def observe(self, signals: InFlight) -> float | None:
        self.signals.append(signals)
        self.seen.release()
        return self.answers.pop(0) if self.answers else None


def controller(estimator, published: list) -> RateController:
    return RateController(estimator, published.append, stream=f"test-{uuid.uuid4().hex[:8]}")


def running_and_queued() -> list[BatchInfo]:
    return [
        BatchInfo(9_000, 5_000, submission_time_ms=9_000, processing_start_ms=9_000, stream_records={0: 5_000}),
        BatchInfo(10_000, 4_000, submission_time_ms=10_000, stream_records={0: 4_000}),
    ]


def test_sampler_feeds_elapsed_queue_backlog_lag_and_rate_every_interval():
    clock = ManualClock(10_000)
    estimator, published = Observing(None, 3_000.0), []
    sampler = InFlightSampler(
        {0: controller(estimator, published)},
        running_and_queued,
        lambda: {0: (1_234, 50)},
        clock=clock,
        interval_ms=INTERVAL,
        rate=lambda s: 4_000.0,
    )
    sampler.start()
    try:
        assert clock.wait_for_waiters(1)
        assert not estimator.seen.acquire(timeout=0.05)  # nothing before the first interval
        clock.advance(INTERVAL)
        assert estimator.seen.acquire(timeout=5)
        assert estimator.signals[0] == InFlight(
            10_200, (RunningBatch(9_000, 5_000, 1_200),), (QueuedBatch(10_000, 4_000),), 1_234, 50, 4_000.0
        )
        assert published == []  # observe said nothing: nothing published
        assert clock.wait_for_waiters(1)
        clock.advance(INTERVAL)
        assert estimator.seen.acquire(timeout=5)
        assert estimator.signals[1].running[0].elapsed_ms == 1_400
        assert clock.wait_for_waiters(1)  # the rate is published before the next wait
        assert published == [3_000.0]
    finally:
        sampler.stop()


def test_a_slow_tracker_delays_the_sample_never_a_batch():
    """The status call runs on the sampler's thread outside the controller's lock: a batch that
    completes meanwhile is estimated and published at once."""
    clock = ManualClock(10_000)
    estimator, published = Observing(), []
    rate_controller = controller(estimator, published)
    entered, release = threading.Event(), threading.Event()

    def slow_backlog():
        entered.set()
        release.wait(10)
        return {0: (0, 0)}

    sampler = InFlightSampler({0: rate_controller}, running_and_queued, slow_backlog, clock=clock, interval_ms=INTERVAL)
    sampler.start()
    try:
        assert clock.wait_for_waiters(1)
        clock.advance(INTERVAL)
        assert entered.wait(5)
        info = BatchInfo(
            9_000,
            5_000,
            submission_time_ms=9_000,
            processing_start_ms=9_000,
            processing_end_ms=10_200,
            status="succeeded",
        )
        done = threading.Event()
        job = threading.Thread(target=lambda: (rate_controller.on_batch_completed(info), done.set()))
        job.start()
        assert done.wait(2), "a completed batch waited for the sampler's status call"
        assert published == [500.0]
    finally:
        release.set()
        sampler.stop()
    assert estimator.seen.acquire(timeout=5)


def test_an_unreadable_backlog_leaves_the_other_signals(caplog):
    clock = ManualClock(10_000)
    estimator = Observing()

    def broken():
        raise ConnectionError("tracker away")

    sampler = InFlightSampler(
        {0: controller(estimator, [])}, running_and_queued, broken, clock=clock, interval_ms=INTERVAL
    )
    sampler.sample()
    sampler.sample()
    assert [s.backlog_records for s in estimator.signals] == [None, None]
    assert all(s.running and s.queued for s in estimator.signals)
    assert sum("backlog could not be read" in r.message for r in caplog.records) == 1  # logged once


def test_one_thread_for_an_estimator_that_opts_in_none_for_the_pid():
    clock = ManualClock(0)
    adaptive = RateLoop(MemorySource(), (0,), batch_interval_ms=1000, estimator="adaptive")
    pid = RateLoop(MemorySource(), (0,), batch_interval_ms=1000, estimator="pid")
    before = sum(t.name == "rate-signals" for t in threading.enumerate())
    try:
        for _ in range(3):  # whatever calls it again, one sampler
            adaptive.start_sampling(list, clock)
            pid.start_sampling(list, clock)
        assert sum(t.name == "rate-signals" for t in threading.enumerate()) == before + 1
        assert pid.sampler is None and isinstance(pid.controllers[0].estimator, PIDRateEstimator)
    finally:
        adaptive.close()
    assert adaptive.sampler is not None and not adaptive.sampler._thread.is_alive()


def test_the_scheduler_reports_running_and_queued_batches(spark):
    clock = ManualClock(5_000)
    gate, started = threading.Event(), threading.Event()

    def slow(batch: Batch) -> None:
        started.set()
        gate.wait(10)

    scheduler = JobScheduler(slow, MemorySource(), clock=clock)
    try:
        scheduler.submit(Batch(4_000, spark.sparkContext.emptyRDD(), spark, num_records=10, stream_records={0: 10}))
        scheduler.submit(Batch(5_000, spark.sparkContext.emptyRDD(), spark, num_records=20, stream_records={0: 20}))
        assert started.wait(5)
        clock.advance(700)
        signals = in_flight(clock.now_ms(), 0, scheduler.in_flight(), (3, None))
        assert signals == InFlight(5_700, (RunningBatch(4_000, 10, 700),), (QueuedBatch(5_000, 20),), 3, None)
    finally:
        gate.set()
        scheduler.stop(graceful=True, timeout=10)
    assert scheduler.in_flight() == []


def test_sampling_interval_must_be_positive():
    with pytest.raises(ValueError, match="above 0 ms"):
        InFlightSampler({}, list, None, clock=ManualClock(0), interval_ms=0)


def test_the_leaders_status_gives_each_stream_its_backlog_and_its_live_receivers_lag():
    """Backlog and recovery read the leader's status, never a standby's copy of the log (empty here,
    as a standby's is while it has not read the log): a pending batch taken from it would be lost."""
    from sluice.spark_driver.receiver_source import ReceiverSource

    status = {
        "streams": {"0": {"unallocated_records": 700}, "1": {"unallocated_records": 0}},
        "receivers": {
            "a": {"stream_id": 0, "live": True, "lag": 40},
            "b": {"stream_id": 0, "live": True, "lag": 2},
            "c": {"stream_id": 0, "live": False, "lag": 1_000},  # dead: not counted
            "d": {"stream_id": 1, "live": True, "lag": None},
        },
        "pending_batches": [5_000],
    }
    standby_copy = {"streams": {}, "receivers": {}, "pending_batches": []}

    class Client:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def start(self) -> None:
            pass

        def status(self, *, leader: bool = False) -> dict:
            return status if leader else standby_copy

    source = ReceiverSource("127.0.0.1:1", client_factory=Client)
    source.start(None)
    assert source.recover() == [5_000]
    assert source.backlog() == {0: (700, 42), 1: (0, None)}
