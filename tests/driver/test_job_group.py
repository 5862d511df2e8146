"""A batch's Spark jobs run in the batch's job group, so a stop without grace cancels them."""

from __future__ import annotations

import threading
import time

import pytest

from sluice.clock import ManualClock
from sluice.embedded import wait_until
from sluice.spark_driver.batch import Batch
from sluice.spark_driver.job_scheduler import JobScheduler
from tests.driver.fakes import MemorySource


@pytest.mark.timing("tolerates 20 s for a cancel that takes a second or two: three busy workers beside it on two cores")
def test_a_stop_without_grace_cancels_the_running_batchs_spark_job(spark) -> None:
    errors: list[BaseException] = []
    ended = threading.Event()

    def outlasting(x: object) -> object:
        """Each task outlasts the test by far: only the cancellation of its job group ends it soon."""
        time.sleep(30)
        return x

    def run(batch: Batch) -> None:
        try:
            batch.rdd.map(outlasting).collect()
        except Exception as exc:
            errors.append(exc)
            raise
        finally:
            ended.set()

    scheduler = JobScheduler(run, MemorySource(), clock=ManualClock(1_000), max_batch_retries=0)
    scheduler.submit(Batch(1_000, spark.sparkContext.parallelize([1, 2], 2), spark, num_records=2))
    tracker = spark.sparkContext.statusTracker()
    # an active job: an earlier test's batch 1000 (same group name, same SparkContext) has ended
    wait_until(
        lambda: set(tracker.getJobIdsForGroup("sluice-batch-1000")) & set(tracker.getActiveJobsIds()),
        "the batch's job running in its group",
        60,
    )

    started = time.monotonic()
    scheduler.stop(graceful=False, timeout=20)
    assert ended.wait(20), "the batch's Spark job ran on after the stop"
    assert time.monotonic() - started < 20
    assert errors and "cancel" in str(errors[0]).lower()
