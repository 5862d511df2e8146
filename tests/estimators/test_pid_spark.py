"""PIDRateEstimator against Spark's own ``PIDRateEstimator.compute``.

Two checks.  A line-by-line transliteration of the Scala method, kept here independent of the
module (fast, no JVM).  And the oracle itself: Spark's
``org.apache.spark.streaming.scheduler.rate.PIDRateEstimator`` from the spark-streaming jar in
the pyspark wheel, called through the test session's py4j gateway over random sequences; every
double must be the very same (NaN matching NaN).  Source: apache/spark
streaming/src/main/scala/org/apache/spark/streaming/scheduler/rate/PIDRateEstimator.scala.
"""

from __future__ import annotations

import math
import random

import pytest

from sluice.estimators import PIDRateEstimator


class ScalaTransliteration:
    """The Scala class read line by line, in Python (no shared code with estimators.pid)."""

    def __init__(self, batch_interval_millis, proportional, integral, derivative, min_rate):
        self.b, self.p, self.i = batch_interval_millis, proportional, integral
        self.d, self.m = derivative, min_rate
        self.first_run, self.latest_time, self.latest_rate, self.latest_error = True, -1, -1.0, -1.0

    def compute(self, time, num_elements, processing_delay, scheduling_delay):
        if time > self.latest_time and num_elements > 0 and processing_delay > 0:
            delay_since_update = float(time - self.latest_time) / 1000
            processing_rate = float(num_elements) / processing_delay * 1000
            error = self.latest_rate - processing_rate
            historical_error = float(scheduling_delay) * processing_rate / self.b
            d_error = (error - self.latest_error) / delay_since_update
            x = self.latest_rate - self.p * error - self.i * historical_error - self.d * d_error
            new_rate = x if (math.isnan(x) or x >= self.m) else self.m  # Math.max
            self.latest_time = time
            if self.first_run:
                self.latest_rate, self.latest_error, self.first_run = processing_rate, 0.0, False
                return None
            self.latest_rate, self.latest_error = new_rate, error
            return new_rate
        return None


def random_sequences(seed: int, count: int, length: int):
    """(params, calls) pairs: mostly advancing time, some guard hits, wide magnitudes."""
    rng = random.Random(seed)
    for _ in range(count):
        params = (
            rng.choice([1, 7, 200, 1000, 2000, 10_000, rng.randint(1, 120_000)]),
            rng.choice([0.0, 1.0, rng.uniform(0, 3)]),
            rng.choice([0.0, 0.2, rng.uniform(0, 3)]),
            rng.choice([0.0, 0.0, rng.uniform(0, 2)]),
            rng.choice([100.0, 1.0, rng.uniform(0.01, 5000)]),
        )
        time, calls = rng.randint(0, 10**12), []
        for _ in range(length):
            time += rng.choice([0, -1, rng.randint(1, 3000), params[0], rng.randint(1, 10**6)])
            elements = rng.choice([0, -1, rng.randint(1, 100), rng.randint(1, 10**7), rng.randint(1, 10**12)])
            processing = rng.choice([0, -3, rng.randint(1, 50), rng.randint(1, 10**5)])
            scheduling = rng.choice([0, 0, rng.randint(0, 10**4), rng.randint(0, 10**7)])
            calls.append((time, elements, processing, scheduling))
        yield params, calls


def test_matches_the_scala_transliteration() -> None:
    for params, calls in random_sequences(seed=2, count=300, length=60):
        ours, ref = PIDRateEstimator(*params), ScalaTransliteration(*params)
        for call in calls:
            a, b = ours.compute(*call), ref.compute(*call)
            assert a == b, (params, call, a, b)  # exactly the same doubles


def _same_double(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


def spark_pid(spark, params: tuple):
    """Spark's own estimator, from the spark-streaming jar the pyspark wheel ships.

    The class is ``private[streaming]`` in Scala, which the bytecode makes public, so py4j can
    construct it; ``compute`` answers a ``scala.Option[Double]``.
    """
    rate = spark.sparkContext._jvm.org.apache.spark.streaming.scheduler.rate
    return rate.PIDRateEstimator(*params)


@pytest.mark.slow
@pytest.mark.spark
def test_matches_sparks_own_estimator_through_py4j(spark) -> None:
    compared = estimates = 0
    for params, calls in random_sequences(seed=1729, count=150, length=60):
        ours, theirs = PIDRateEstimator(*params), spark_pid(spark, params)
        for call in calls:
            answer = theirs.compute(*call)
            expected = answer.get() if answer.isDefined() else None
            mine = ours.compute(*call)
            assert _same_double(mine, expected), (params, call, mine, expected)
            compared += 1
            estimates += expected is not None
    assert compared == 150 * 60 and estimates > 2000  # the guards did not swallow everything
