"""Trigger policies (DStream's fixed interval, Structured Streaming's ``ProcessingTimeExecutor``, once,
available-now) as pure logic, and with the real job generator on a manual clock."""

from __future__ import annotations

import threading

import pytest

from sluice.clock import ManualClock
from sluice.config import Trigger, key
from sluice.spark_driver import metrics, triggers
from sluice.spark_driver.batch import BatchInfo
from sluice.spark_driver.job_generator import JobGenerator
from sluice.spark_driver.job_scheduler import JobScheduler
from sluice.spark_driver.source import SourceContext
from tests.driver.fakes import MemorySource


def test_next_batch_time() -> None:
    assert triggers.next_batch_time(0, 1000) == 1000
    assert triggers.next_batch_time(999, 1000) == 1000
    assert triggers.next_batch_time(1000, 1000) == 2000
    assert triggers.next_batch_time(2500, 1000) == 3000
    assert triggers.next_batch_time(1234, 0) == 1234
    with pytest.raises(ValueError, match="interval"):
        triggers.next_batch_time(1, -1)


def test_unknown_trigger_names_the_choices() -> None:
    with pytest.raises(ValueError, match="fixed, processing-time, once, available-now"):
        triggers.create("sometimes", 1000)


def test_every_configurable_trigger_has_one_policy_of_that_name() -> None:
    """The names live once, in the configuration schema; each maps to a policy answering to it."""
    assert key("driver.trigger").choices == triggers.TRIGGERS == tuple(t.value for t in Trigger)
    for name in triggers.TRIGGERS:
        assert triggers.create(name, 1000).name == name


def test_fixed_queues_the_batch_after_an_overrun() -> None:
    # 1000 ms interval, the first batch takes 1500 ms.
    runs = triggers.simulate(triggers.create("fixed", 1000), 500, [1500, 100, 100])
    assert [(b.trigger_ms, b.start_ms, b.end_ms) for b in runs] == [
        (1000, 1000, 2500),
        (2000, 2500, 2600),
        (3000, 3000, 3100),
    ]
    assert [b.scheduling_delay_ms for b in runs] == [0, 500, 0]
    assert all(b.falling_behind_ms is None for b in runs)


def test_fixed_after_a_restart_creates_the_boundary_that_passed_at_once() -> None:
    """Spark's JobGenerator.restart: the down time's batch now, not at the next boundary."""
    fixed = triggers.create("fixed", 1000)
    assert fixed.first_trigger(5300) == 6000  # the stream's first run: the next boundary
    assert fixed.first_trigger(5300, last_batch_ms=2000) == 5000  # boundaries passed with no driver
    assert fixed.first_trigger(5300, last_batch_ms=5000) == 6000  # the last run made that one
    assert triggers.create("processing-time", 1000).first_trigger(5300, last_batch_ms=2000) == 5300


def test_processing_time_starts_at_once_after_an_overrun() -> None:
    runs = triggers.simulate(triggers.create("processing-time", 1000), 1000, [1500, 100, 100])
    assert [(b.trigger_ms, b.start_ms) for b in runs] == [(1000, 1000), (2500, 2500), (3000, 3000)]
    assert [b.scheduling_delay_ms for b in runs] == [0, 0, 0]
    assert runs[0].falling_behind_ms == 1500 and runs[1].falling_behind_ms is None


def test_processing_time_on_time_waits_for_the_boundary() -> None:
    runs = triggers.simulate(triggers.create("processing-time", 1000), 1200, [300, 300])
    assert [b.trigger_ms for b in runs] == [1200, 2000]


def test_fixed_scheduling_delay_grows_when_every_batch_overruns() -> None:
    runs = triggers.simulate(triggers.create("fixed", 1000), 0, [1500] * 6)
    delays = [b.scheduling_delay_ms for b in runs]
    assert delays == [0, 500, 1000, 1500, 2000, 2500]


def test_once_and_available_now_stop() -> None:
    assert len(triggers.simulate(triggers.create("once", 1000), 0, [10, 10, 10])) == 1
    runs = triggers.simulate(
        triggers.create("available-now", 1000), 0, [10] * 10, more_available=[True, True, False] + [True] * 7
    )
    assert [b.trigger_ms for b in runs] == [0, 1000, 2000]


def test_concurrent_jobs_overlap_under_fixed() -> None:
    runs = triggers.simulate(triggers.create("fixed", 1000), 0, [1500, 1500, 1500], concurrent_jobs=2)
    assert [b.start_ms for b in runs] == [1000, 2000, 3000]


class _Gate:
    """A batch function that blocks until the test releases it; records start times."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.started: dict[int, int] = {}
        self.started_event: dict[int, threading.Event] = {}
        self.release: dict[int, threading.Event] = {}
        self.lock = threading.Lock()

    def _events(self, t: int) -> tuple[threading.Event, threading.Event]:
        with self.lock:
            return (self.started_event.setdefault(t, threading.Event()), self.release.setdefault(t, threading.Event()))

    def __call__(self, batch) -> None:
        started, release = self._events(batch.time_ms)
        self.started[batch.time_ms] = int(self.clock.now_ms())
        started.set()
        assert release.wait(10), f"batch {batch.time_ms} was never released"

    def wait_started(self, t: int) -> None:
        assert self._events(t)[0].wait(10), f"batch {t} never started"

    def finish(self, t: int) -> None:
        self._events(t)[1].set()


class _Submitted:
    def __init__(self) -> None:
        self.infos: dict[int, BatchInfo] = {}
        self.cond = threading.Condition()

    def on_batch_submitted(self, info: BatchInfo) -> None:
        with self.cond:
            self.infos[info.batch_time_ms] = info
            self.cond.notify_all()

    def on_batch_completed(self, info: BatchInfo) -> None:
        with self.cond:
            self.infos[info.batch_time_ms] = info
            self.cond.notify_all()

    def wait(self, predicate) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.infos), 10)


def _run(spark, trigger: str, start_ms: int):
    """A generator and scheduler on a manual clock; the batches carry the real session, whose
    jobs the scheduler tags with the batch's job group."""
    clock = ManualClock(start_ms)
    source = MemorySource()
    source.start(SourceContext(spark=spark, batch_interval_ms=1000))
    gate = _Gate(clock)
    scheduler = JobScheduler(gate, source, clock=clock)
    seen = _Submitted()
    scheduler.add_listener(seen)
    generator = JobGenerator(source, scheduler, triggers.create(trigger, 1000), clock=clock)
    return clock, gate, scheduler, seen, generator


def test_job_generator_fixed_queues_behind_a_slow_batch(spark) -> None:
    clock, gate, scheduler, seen, generator = _run(spark, "fixed", 0)
    generator.start()
    try:
        assert clock.wait_for_waiters(1)
        clock.set_time(1000)
        gate.wait_started(1000)
        clock.set_time(2000)  # the timer ticks although batch 1000 still runs
        seen.wait(lambda infos: 2000 in infos)
        clock.set_time(2500)
        gate.finish(1000)
        gate.wait_started(2000)
        assert gate.started == {1000: 1000, 2000: 2500}
        gate.finish(2000)
        seen.wait(lambda infos: infos[2000].status == "succeeded")
        assert seen.infos[2000].scheduling_delay_ms == 500
        assert seen.infos[1000].processing_delay_ms == 1500
    finally:
        for t in (1000, 2000, 3000):
            gate.finish(t)
        generator.stop(graceful=False)
        scheduler.stop(graceful=False)


def test_job_generator_processing_time_starts_at_once_and_counts_falling_behind(spark) -> None:
    clock, gate, scheduler, seen, generator = _run(spark, "processing-time", 1000)
    before = metrics.FALLING_BEHIND._value.get()
    generator.start()
    try:
        gate.wait_started(1000)
        clock.set_time(2500)
        gate.finish(1000)
        gate.wait_started(2500)  # no wait for the 3000 boundary: at once
        assert gate.started == {1000: 1000, 2500: 2500}
        assert seen.infos[2500].submission_time_ms == 2500
        assert metrics.FALLING_BEHIND._value.get() == before + 1
        gate.finish(2500)
        assert clock.wait_for_waiters(1)  # on time now: waits for the 3000 boundary
        assert 3000 not in gate.started
    finally:
        for t in (1000, 2500, 3000):
            gate.finish(t)
        generator.stop(graceful=False)
        scheduler.stop(graceful=False)


def test_job_generator_restarted_creates_the_passed_boundary_then_ticks(spark) -> None:
    clock, gate, scheduler, seen, generator = _run(spark, "fixed", 5300)
    generator.start(last_batch_ms=2000)
    try:
        gate.wait_started(5000)  # at once: the clock stands at 5300
        assert seen.infos[5000].submission_time_ms == 5300  # its scheduling delay counts from now
        gate.finish(5000)
        assert clock.wait_for_waiters(1)
        clock.set_time(6000)
        gate.wait_started(6000)
        assert gate.started == {5000: 5300, 6000: 6000}
    finally:
        for t in (5000, 6000, 7000):
            gate.finish(t)
        generator.stop(graceful=False)
        scheduler.stop(graceful=False)
