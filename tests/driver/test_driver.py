"""StreamingDriver with an in-memory source: start order, restart, failure policies, triggers."""

from __future__ import annotations

import threading

import pytest

from sluice.spark_driver import StreamingDriver, metrics
from sluice.spark_driver.batch import BatchInfo
from sluice.spark_driver.job_scheduler import BatchFailedError
from tests.driver.fakes import MemorySource

pytestmark = pytest.mark.spark


class Collector:
    """The user's function: collects each batch's values; can fail on chosen batches."""

    def __init__(self, fail: set[int] | None = None, fail_times: int = 10**9) -> None:
        self.values: list = []
        self.batches: list[int] = []
        self.fail = fail or set()
        self.fail_times = fail_times
        self.calls: dict[int, int] = {}
        self.cond = threading.Condition()

    def __call__(self, batch) -> None:
        self.calls[batch.time_ms] = self.calls.get(batch.time_ms, 0) + 1
        values = batch.rdd.collect()
        if batch.time_ms in self.fail and self.calls[batch.time_ms] <= self.fail_times:
            raise ValueError(f"bad record in batch {batch.time_ms}")
        with self.cond:
            self.values.extend(values)
            self.batches.append(batch.time_ms)
            self.cond.notify_all()

    def wait_for(self, n: int, timeout: float = 30) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.values) >= n, timeout), f"{len(self.values)} of {n}"


def test_graceful_stop_processes_what_was_received(spark) -> None:
    source = MemorySource()
    fn = Collector()
    driver = StreamingDriver(spark, source=source, batch_interval_ms=100, backpressure=False)
    driver.foreach_batch(fn).start()
    source.offer(list(range(50)))
    fn.wait_for(50)
    source.offer(list(range(50, 80)))  # received, not yet in a batch: the last batch takes it
    driver.stop(graceful=True)
    assert sorted(fn.values) == list(range(80))
    assert driver.await_termination(1) and source.stopped and driver.state == "stopped"
    times = [info.batch_time_ms for info in source.completed]
    assert times == sorted(times) and all(t % 100 == 0 for t in times)
    assert all(info.status == "succeeded" and info.processing_end_ms is not None for info in source.completed)


def test_restart_reruns_pending_batches_first_and_publishes_initial_rate(spark) -> None:
    source = MemorySource(recovered={1000: ["a", "b"], 2000: ["c"]})
    fn = Collector()
    seen: list[BatchInfo] = []

    class Listener:
        def on_batch_completed(self, info: BatchInfo) -> None:
            seen.append(info)

    driver = StreamingDriver(
        spark,
        source=source,
        batch_interval_ms=100,
        initial_rate=500.0,
        estimator="constant",
        estimator_options={"rate": 500.0},
    )
    driver.add_listener(Listener())
    driver.foreach_batch(fn).start()
    fn.wait_for(3)
    source.offer(["d"])
    fn.wait_for(4)
    driver.stop()
    assert fn.batches[:2] == [1000, 2000] and sorted(fn.values) == ["a", "b", "c", "d"]
    assert source.events[:4] == ["start", "recover", "rebuild 1000", "rebuild 2000"]
    assert source.published[0] == (0, 500.0)  # before the first batch
    assert [i.batch_time_ms for i in seen][:2] == [1000, 2000]


def test_restart_resumes_the_trackers_last_rate_instead_of_the_initial_rate(spark) -> None:
    source = MemorySource(last_rate=1234.0)
    driver = StreamingDriver(
        spark,
        source=source,
        batch_interval_ms=100,
        initial_rate=10.0,
        estimator="constant",
        estimator_options={"rate": 1234.0},
    )
    driver.foreach_batch(Collector()).start()
    try:
        assert driver.rate_loop.current_rate() == 1234.0
        assert (0, 10.0) not in source.published
    finally:
        driver.stop(graceful=False)


def test_on_batch_failure_stop_names_the_batch_and_keeps_it_pending(spark) -> None:
    source = MemorySource(recovered={700: [1, 2, 3]})
    fn = Collector(fail={700})
    failed_before = metrics.BATCHES_FAILED._value.get()
    driver = StreamingDriver(
        spark, source=source, batch_interval_ms=100, backpressure=False, max_batch_retries=1, on_batch_failure="stop"
    )
    driver.foreach_batch(fn).start()
    with pytest.raises(BatchFailedError, match="batch 700 failed after 2 attempt.*bad record in batch 700"):
        driver.await_termination(30)
    assert fn.calls[700] == 2 and driver.state == "stopped"
    assert all(i.batch_time_ms != 700 for i in source.completed)  # still pending: a restart re-runs it
    assert metrics.BATCHES_FAILED._value.get() == failed_before + 1


def test_on_batch_failure_skip_goes_on(spark) -> None:
    source = MemorySource(recovered={700: [1, 2, 3]})
    fn = Collector(fail={700})
    driver = StreamingDriver(
        spark, source=source, batch_interval_ms=100, backpressure=False, max_batch_retries=2, on_batch_failure="skip"
    )
    driver.foreach_batch(fn).start()
    source.offer([4, 5])
    fn.wait_for(2)
    driver.stop()
    assert fn.calls[700] == 3 and sorted(fn.values) == [4, 5]
    skipped = [i for i in source.completed if i.batch_time_ms == 700]
    assert skipped and skipped[0].status == "skipped" and "bad record" in skipped[0].failure


def test_a_retry_that_succeeds_is_not_a_failure(spark) -> None:
    source = MemorySource(recovered={700: [1]})
    fn = Collector(fail={700}, fail_times=1)
    driver = StreamingDriver(spark, source=source, batch_interval_ms=100, backpressure=False)
    driver.foreach_batch(fn).start()
    fn.wait_for(1)
    driver.stop()
    assert fn.values == [1] and source.completed[0].status == "succeeded" and source.completed[0].attempts == 2


def test_once_trigger_runs_one_batch_and_stops(spark) -> None:
    source = MemorySource()
    source.offer([1, 2, 3])
    fn = Collector()
    driver = StreamingDriver(spark, source=source, batch_interval_ms=100, trigger="once", backpressure=False)
    driver.foreach_batch(fn).start()
    assert driver.await_termination(30)
    assert fn.values == [1, 2, 3] and len(fn.batches) == 1


def test_available_now_drains_in_rate_limited_batches(spark) -> None:
    source = MemorySource(use_rate=True)
    source.offer(list(range(100)))
    fn = Collector()
    driver = StreamingDriver(
        spark,
        source=source,
        batch_interval_ms=100,
        trigger="available-now",
        initial_rate=300.0,
        estimator="constant",
        estimator_options={"rate": 300.0},
    )
    driver.foreach_batch(fn).start()
    assert driver.await_termination(60)
    assert sorted(fn.values) == list(range(100))
    assert len(fn.batches) == 4  # 30 records per 100 ms batch at 300 records/s


def test_bad_settings_are_named() -> None:
    source = MemorySource()
    with pytest.raises(ValueError, match="on_batch_failure must be one of stop, skip"):
        StreamingDriver(object(), source=source, on_batch_failure="retry", backpressure=False)
    with pytest.raises(ValueError, match="unknown trigger 'soon'"):
        StreamingDriver(object(), source=source, trigger="soon", backpressure=False)
    with pytest.raises(ValueError, match="tracker address"):
        StreamingDriver(object(), backpressure=False)
