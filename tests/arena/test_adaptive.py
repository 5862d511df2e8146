"""The adaptive controller against Spark's PID, scenario by scenario, and its guards.

Figures asserted are the arena's: batches to steady, peak scheduling delay (after a capacity
step), batches at the minimum rate, steady utilisation.  Every claim holds on each of seeds 0-19
(the noise draws), none on a chosen seed; where the controller does not win on every seed, the
test says what it claims instead and docs/guide/rate-control.md says why.
"""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice import estimators
from sluice.estimators.adaptive import AdaptiveRateEstimator, adaptive_factory
from sluice.estimators.arena import get_scenario, run_one, scenario_names

NEVER = 10**9
SEEDS = range(20)


def steady(metrics) -> int:
    return NEVER if metrics.batches_to_steady is None else metrics.batches_to_steady


@pytest.fixture(scope="module")
def figures():
    """{(scenario, estimator): [metrics of seed 0, ..., seed 19]}."""
    return {
        (s, e): [run_one(s, e, seed=seed).metrics for seed in SEEDS]
        for s in scenario_names()
        for e in ("pid", "adaptive")
    }


def pairs(figures, scenario):
    return list(zip(figures[scenario, "adaptive"], figures[scenario, "pid"]))


@pytest.mark.parametrize("scenario", ["spark_measured", "gc_cliff", "cold_start"])
def test_steady_sooner_than_pid_on_every_seed(figures, scenario):
    assert all(steady(a) < steady(p) for a, p in pairs(figures, scenario))


def test_step_down_steady_never_later_than_pid(figures):
    """Sooner on 19 seeds of 20; on one both need 14 batches (a noise draw keeps one late batch out of band)."""
    both = pairs(figures, "step_down")
    assert all(steady(a) <= steady(p) for a, p in both)
    assert sum(steady(a) < steady(p) for a, p in both) >= 19
    assert statistics.median(steady(a) for a, _ in both) <= 5


def test_step_up_ties_the_pid_on_the_median(figures):
    """After a step up two batches are out of band whatever the estimator: the one running at
    the step and the one being filled when the first fast batch reports (its records were
    admitted at the old rate).  Both reach that floor on the median; on a few seeds the
    controller needs one or two batches more (docs/guide/rate-control.md: where it loses)."""
    both = pairs(figures, "step_up")
    assert statistics.median(steady(a) for a, _ in both) == statistics.median(steady(p) for _, p in both) == 2
    assert all(steady(a) <= steady(p) + 2 for a, p in both)


def test_periodic_steady_no_later_than_pid_on_the_median(figures):
    """A daily cycle has no step: one batch a millisecond out of band late in the run restarts
    the count, for either estimator; the median is the claim (docs/guide/rate-control.md: where it loses)."""
    both = pairs(figures, "periodic")
    assert statistics.median(steady(a) for a, _ in both) <= statistics.median(steady(p) for _, p in both)


@pytest.mark.parametrize("scenario", ["step_down", "step_up"])
def test_peak_delay_after_step_under_one_and_a_half_intervals(figures, scenario):
    assert all(a.peak_delay_after_change_intervals < 1.5 for a in figures[scenario, "adaptive"])


@pytest.mark.parametrize("scenario", ["spark_measured", "step_down", "gc_cliff", "cold_start"])
def test_peak_delay_lower_than_pid_on_every_seed(figures, scenario):
    assert all(
        a.peak_scheduling_delay_intervals < p.peak_scheduling_delay_intervals for a, p in pairs(figures, scenario)
    )


@pytest.mark.parametrize("scenario", scenario_names())
def test_never_at_min_rate_and_utilised_on_every_seed(figures, scenario):
    for m in figures[scenario, "adaptive"]:
        assert m.batches_at_min_rate == 0
        assert m.steady_utilization >= 0.95


def test_spark_case_the_pid_pins_at_the_minimum_the_controller_never(figures):
    for a, p in pairs(figures, "spark_measured"):
        assert p.batches_at_min_rate > 10 and a.batches_at_min_rate == 0
        assert a.peak_scheduling_delay_intervals < 0.6 * p.peak_scheduling_delay_intervals


def test_registered_as_builtin_and_answers_first_batch():
    assert "adaptive" in estimators.available()
    estimator = estimators.create("adaptive", 1000, {})
    assert estimators.create("pid", 1000, {}).compute(1000, 5000, 500, 0) is None  # Spark: first is None
    rate = estimator.compute(1000, 5000, 500, 0)
    assert rate is not None and 5000 < rate <= 10_000  # probes up, within the trust region


@pytest.mark.parametrize(
    "options, message",
    [
        ({"bogus": 1}, "unknown option"),
        ({"min_rate": 0}, "min_rate"),
        ({"max_rate": 50}, "max_rate"),
        ({"utilization": "lots"}, "utilization"),
        ({"drain_batches": True}, "drain_batches"),
        ({"forgetting": 1.5}, "forgetting"),
    ],
)
def test_options_validated_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        estimators.create("adaptive", 1000, options)


def test_numeric_strings_accepted():
    estimator = adaptive_factory(1000, {"min_rate": "10", "max_rate": "20000", "utilization": "0.97"})
    assert (estimator.min_rate, estimator.max_rate, estimator.utilization) == (10.0, 20000.0, 0.97)


def test_guard_rejects_what_spark_rejects():
    estimator = AdaptiveRateEstimator(1000)
    assert estimator.compute(1000, 0, 500, 0) is None
    assert estimator.compute(1000, 100, 0, 0) is None
    assert estimator.compute(2000, 100, 100, 0) is not None
    assert estimator.compute(2000, 100, 100, 0) is None  # time not after the last update
    assert estimator.compute(3000, 100, math.nan, 0) is None


def test_learns_the_cliff_shape():
    """Past a spill cliff the local line is steeper than the average: overhead goes negative."""
    scenario = get_scenario("gc_cliff")
    instance = AdaptiveRateEstimator(1000)
    from sluice.estimators.arena import simulate

    simulate(scenario.model, scenario.source, scenario.config, instance)
    assert instance.overhead_records(7000) < 0
    linear = AdaptiveRateEstimator(1000)
    step = get_scenario("step_down")
    simulate(step.model, step.source, step.config, linear)
    assert linear.overhead_records(10_000) > 0


ints = st.integers(min_value=-(10**12), max_value=10**12)
call = st.tuples(st.integers(min_value=-(10**6), max_value=10**7), ints, ints, ints)


@settings(max_examples=200, deadline=None)
@given(
    calls=st.lists(call, min_size=1, max_size=40),
    min_rate=st.floats(min_value=0.001, max_value=1e6),
    span=st.floats(min_value=1.0, max_value=1e6),
    interval=st.integers(min_value=1, max_value=600_000),
)
def test_guards_hold_for_any_input(calls, min_rate, span, interval):
    max_rate = min_rate * span
    estimator = AdaptiveRateEstimator(interval, min_rate=min_rate, max_rate=max_rate)
    time = 0
    for dt, elements, processing, scheduling in calls:
        time += dt
        rate = estimator.compute(time, elements, processing, scheduling)
        if rate is not None:
            assert math.isfinite(rate)
            assert min_rate <= rate <= max_rate


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10**6), st.floats(1, 1e7), st.floats(0, 1e9)), min_size=1, max_size=30))
def test_guards_hold_for_float_delays(batches):
    estimator = AdaptiveRateEstimator(1000)
    for i, (elements, processing, scheduling) in enumerate(batches):
        rate = estimator.compute((i + 1) * 1000, elements, processing, scheduling)
        assert rate is not None and math.isfinite(rate) and rate >= 100
