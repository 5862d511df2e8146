"""The adaptive controller's use of in-flight signals: act on an overrun before it completes,
size the drain on the batches really queued, and never raise the rate on a signal."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.estimators.adaptive import AdaptiveRateEstimator
from sluice.estimators.base import InFlight, QueuedBatch, RunningBatch
from sluice.testing.arena import get_scenario, simulate
from sluice.testing.arena.metrics import measure

SEEDS = range(20)


def modelled() -> AdaptiveRateEstimator:
    """A controller that has seen a few batches at 0.1 ms per record (10,000 records/s)."""
    estimator = AdaptiveRateEstimator(1000)
    for i, n in enumerate((8_000, 9_000, 10_000, 9_500, 10_000)):
        estimator.compute(1_000 * (i + 2), n, n // 10, 0)
    return estimator


def overrun(elapsed: float, queued: int = 10_000) -> InFlight:
    return InFlight(8_000 + elapsed, (RunningBatch(7_000, 10_000, elapsed),), (QueuedBatch(8_000, queued),))


def test_an_overrunning_batch_lowers_the_rate_before_it_completes():
    estimator = modelled()
    assert estimator.observe(overrun(950)) is None  # on time: nothing to say
    first = estimator.observe(overrun(1_400))  # 40 % slower than its records should be
    assert first is not None and first < 10_000 * 1_000 / 1_400
    second = estimator.observe(overrun(1_900))  # still running: slower still
    assert second is not None and second < first
    assert estimator.observe(overrun(1_910)) is None  # under 5 % lower: no churn


def test_a_signal_never_raises_the_rate():
    """Whatever the running batch shows, an answer to a signal is below the rate in force."""
    estimator = modelled()
    last = estimator.compute(8_000, 10_000, 1_000, 0)
    for records, elapsed in ((10_000, 2_000), (3_000, 100), (3_000, 1_000), (20_000, 500), (500, 3_000)):
        rate = estimator.observe(InFlight(9_000 + elapsed, (RunningBatch(8_000, records, elapsed),)))
        if rate is not None:
            assert rate < last
            last = rate
    assert estimator.observe(InFlight(9_300, (RunningBatch(8_000, 3_000, 300),))) is None  # on time


def test_a_signal_cuts_only_below_the_rate_in_force():
    """Before its first estimate the controller knows the rate in force only from the signal:
    a bound above it (the initial rate) is no cut and is not published."""
    estimator = AdaptiveRateEstimator(1000)
    running = (RunningBatch(1_000, 5_000, 1_200),)  # 5,000 records, 1.2 s so far: capacity < 4,200/s
    assert estimator.observe(InFlight(2_200, running, rate=3_000.0)) is None
    assert estimator.observe(InFlight(2_200, running, rate=8_000.0)) < 8_000 * 0.95


def test_no_model_yet_only_an_overrun_of_the_interval_counts():
    estimator = AdaptiveRateEstimator(1000)
    first_batch = (RunningBatch(1_000, 20_000, 900),)
    assert estimator.observe(InFlight(1_900, first_batch)) is None
    rate = estimator.observe(InFlight(3_000, (RunningBatch(1_000, 20_000, 2_000),)))
    assert rate is not None and rate <= 10_000  # 20,000 records took 2 s already


def test_the_queue_the_sample_saw_sizes_the_drain():
    """After an identical history, the controller that saw twice the records queued drains harder."""
    blind, informed = modelled(), modelled()
    informed.observe(InFlight(7_900, (RunningBatch(7_000, 10_000, 900),), (QueuedBatch(8_000, 20_000),)))
    blind_rate = blind.compute(8_000, 10_000, 1_000, 0)
    informed_rate = informed.compute(8_000, 10_000, 1_000, 0)
    # the batch of 8,000 holds 20,000 records (2 s): the next batch starts ~1 s late either way
    # the blind one believes, at the rate it published, that the queue is one interval
    assert informed_rate < blind_rate


def run(scenario: str, seed: int, signals: bool):
    s = get_scenario(scenario)
    config = s.config if signals else replace(s.config, signal_interval_ms=0)
    trace = simulate(
        s.model,
        s.source,
        config,
        AdaptiveRateEstimator(s.config.batch_interval_ms),
        seed=seed,
        scenario=scenario,
        estimator_name="adaptive",
    )
    return measure(trace, change_times_s=s.change_times_s, min_rate=s.min_rate)


@pytest.mark.slow
def test_signals_cut_the_peak_delay_on_every_seed():
    """Acting while the first overloaded batch still runs: after the step down and in the
    measured Spark case (an initial rate far above capacity), on each of seeds 0-19."""
    for scenario in ("step_down", "spark_measured", "gc_cliff"):
        with_signals = [run(scenario, seed, True).peak_scheduling_delay_intervals for seed in SEEDS]
        without = [run(scenario, seed, False).peak_scheduling_delay_intervals for seed in SEEDS]
        assert all(a < b for a, b in zip(with_signals, without)), (scenario, with_signals, without)
        assert statistics.median(with_signals) < 0.9 * statistics.median(without), scenario


in_flight = st.builds(
    InFlight,
    st.floats(),
    st.lists(
        st.builds(RunningBatch, st.integers(-(10**9), 10**9), st.integers(-10, 10**7), st.floats()), max_size=2
    ).map(tuple),
    st.lists(st.builds(QueuedBatch, st.integers(-(10**9), 10**9), st.integers(-10, 10**7)), max_size=4).map(tuple),
    st.none() | st.integers(0, 10**9),
    st.none() | st.integers(0, 10**9),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        in_flight | st.tuples(st.integers(1, 10**6), st.integers(1, 10**7), st.integers(0, 10**6)),
        min_size=1,
        max_size=30,
    )
)
@pytest.mark.slow
def test_guards_hold_whatever_the_signals(calls):
    estimator = AdaptiveRateEstimator(1000, min_rate=50, max_rate=1e6)
    time = 0
    for item in calls:
        if isinstance(item, InFlight):
            rate = estimator.observe(item)
        else:
            time += 1_000
            rate = estimator.compute(time, *item)
        assert rate is None or (math.isfinite(rate) and 50 <= rate <= 1e6)
