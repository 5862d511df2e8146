"""PIDRateEstimator: a worked example by hand, guards, first call, argument checks, properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sluice.estimators import ConstantEstimator, PIDRateEstimator, PIDTerms, RateEstimator


def last_terms(pid: PIDRateEstimator) -> PIDTerms:
    """The terms of the PID's last estimate (mypy would keep ``last_terms`` narrowed to None after
    the test asserts it is, across the calls that set it)."""
    assert pid.last_terms is not None
    return pid.last_terms


def test_worked_example_by_hand() -> None:
    # PID(batch interval 1000 ms, P=1.0, I=0.2, D=0.1, min_rate=100).
    pid = PIDRateEstimator(1000, proportional=1.0, integral=0.2, derivative=0.1, min_rate=100)

    # 1) t=1000, 2000 records in 1000 ms: processing rate = 2000/1000*1000 = 2000/s.
    #    First call: only records latest_rate=2000, latest_error=0, latest_time=1000 -> None.
    assert pid.compute(1000, 2000, 1000, 0) is None
    assert pid.latest_rate == 2000.0 and pid.latest_time == 1000 and pid.last_terms is None

    # 2) t=2000 (dt = 1.0 s), 2000 records in 1250 ms, waited 500 ms:
    #    processing rate = 2000/1250*1000 = 1600;  error = 2000 - 1600 = 400;
    #    historical = 500 * 1600 / 1000 = 800;     d_error = (400 - 0) / 1.0 = 400;
    #    new = 2000 - 1*400 - 0.2*800 - 0.1*400 = 2000 - 400 - 160 - 40 = 1400.
    assert pid.compute(2000, 2000, 1250, 500) == pytest.approx(1400.0, rel=1e-12)
    terms = last_terms(pid)
    assert (terms.processing_rate, terms.error, terms.historical_error) == (1600.0, 400.0, 800.0)
    assert terms.d_error == 400.0

    # 3) t=4000 (dt = 2.0 s), 1400 records in 700 ms, no wait:
    #    processing rate = 1400/700*1000 = 2000;   error = 1400 - 2000 = -600;
    #    historical = 0;                           d_error = (-600 - 400) / 2.0 = -500;
    #    new = 1400 + 600 - 0 + 0.1*500 = 2050.
    assert pid.compute(4000, 1400, 700, 0) == pytest.approx(2050.0, rel=1e-12)
    assert last_terms(pid).d_error == -500.0

    # 4) t=5000 (dt = 1.0 s), 100 records in 1000 ms, waited 4000 ms:
    #    processing rate = 100;  error = 2050 - 100 = 1950;  historical = 4000*100/1000 = 400;
    #    d_error = (1950 + 600) / 1.0 = 2550;  new = 2050 - 1950 - 80 - 255 = -235 -> min_rate 100.
    assert pid.compute(5000, 100, 1000, 4000) == 100.0
    assert last_terms(pid).error == 1950.0


def test_spark_notes_examples() -> None:
    """spark-notes.md section 2: Some(900.0) with D=0, Some(400.0) with D=0.5."""
    for derivative, expected in ((0.0, 900.0), (0.5, 400.0)):
        pid = PIDRateEstimator(1000, 1.0, 0.2, derivative, 100)
        assert pid.compute(1000, 1000, 500, 0) is None
        assert pid.compute(2000, 1000, 1000, 500) == pytest.approx(expected, rel=1e-12)


def test_defaults_are_sparks() -> None:
    pid = PIDRateEstimator(500)
    assert (pid.proportional, pid.integral, pid.derivative, pid.min_rate) == (1.0, 0.2, 0.0, 100.0)
    assert isinstance(pid, RateEstimator)


@pytest.mark.parametrize(
    "call",
    [
        (1000, 100, 100, 0),  # time not after the last update (equal)
        (999, 100, 100, 0),  # time before the last update
        (3000, 0, 100, 0),  # no elements
        (3000, -5, 100, 0),  # negative elements
        (3000, 100, 0, 0),  # no processing delay
        (3000, 100, -1, 0),  # negative processing delay
    ],
)
def test_guard_returns_none_and_changes_nothing(call: tuple[int, int, int, int]) -> None:
    guarded, plain = PIDRateEstimator(1000), PIDRateEstimator(1000)
    for pid in (guarded, plain):
        assert pid.compute(1000, 1000, 500, 0) is None
    assert guarded.compute(*call) is None
    assert guarded.latest_rate == plain.latest_rate and guarded.latest_time == plain.latest_time
    assert guarded.compute(2000, 1000, 1000, 500) == plain.compute(2000, 1000, 1000, 500) == 900.0


def test_guard_before_first_call_keeps_it_the_first() -> None:
    pid = PIDRateEstimator(1000)
    assert pid.compute(5, 0, 100, 0) is None and pid.compute(5, 10, 0, 0) is None
    assert pid.latest_rate is None and pid.latest_time is None
    assert pid.compute(1000, 1000, 500, 0) is None  # still the first call
    assert pid.latest_rate == 2000.0
    assert pid.compute(0, 1000, 500, 0) is None  # time 0 is before 1000 now


def test_time_zero_passes_the_first_guard() -> None:
    """Spark's latestTime starts at -1, so a first batch at time 0 counts."""
    pid = PIDRateEstimator(1000)
    assert pid.compute(0, 1000, 500, 0) is None
    assert pid.latest_time == 0


@pytest.mark.parametrize(
    "kwargs, name, allowed",
    [
        ({"batch_interval_ms": 0}, "batch_interval_ms", "> 0"),
        ({"batch_interval_ms": -1000}, "batch_interval_ms", "> 0"),
        ({"batch_interval_ms": math.inf}, "batch_interval_ms", "> 0"),
        ({"batch_interval_ms": "1000"}, "batch_interval_ms", "> 0"),
        ({"proportional": -0.1}, "proportional", ">= 0"),
        ({"proportional": math.nan}, "proportional", ">= 0"),
        ({"integral": -1}, "integral", ">= 0"),
        ({"derivative": -1e-9}, "derivative", ">= 0"),
        ({"derivative": True}, "derivative", ">= 0"),
        ({"min_rate": 0}, "min_rate", "> 0"),
        ({"min_rate": -5}, "min_rate", "> 0"),
    ],
)
def test_argument_checks_name_the_argument(kwargs: dict, name: str, allowed: str) -> None:
    args = {"batch_interval_ms": 1000, **kwargs}
    with pytest.raises(ValueError, match=rf"{name} must be a finite number {allowed}"):
        PIDRateEstimator(**args)


def test_zero_gains_are_allowed() -> None:
    pid = PIDRateEstimator(1000, 0, 0, 0, 1)
    pid.compute(1000, 1000, 500, 0)
    assert pid.compute(2000, 10, 1000, 0) == 2000.0  # no correction at all


def test_constant() -> None:
    est = ConstantEstimator(250)
    assert est.compute(0, 0, 0, 0) == 250.0 == est.compute(1000, 10, 10, 10)
    for bad in (0, -1, math.nan, math.inf, "5"):
        with pytest.raises(ValueError, match="rate must be a finite number > 0"):
            ConstantEstimator(bad)  # type: ignore[arg-type]  # the wrong types are the test


# -- properties --------------------------------------------------------------------------------

gains = st.floats(min_value=0.0, max_value=5.0, allow_nan=False)
batch = st.tuples(
    st.integers(min_value=-50, max_value=5000),  # time step (may go back)
    st.integers(min_value=-10, max_value=1_000_000),  # elements
    st.integers(min_value=-10, max_value=20_000),  # processing delay
    st.integers(min_value=0, max_value=60_000),
)  # scheduling delay


@settings(max_examples=300, deadline=None)
@given(
    interval=st.integers(min_value=1, max_value=60_000),
    p=gains,
    i=gains,
    d=gains,
    min_rate=st.floats(min_value=1e-3, max_value=1e6),
    batches=st.lists(batch, max_size=40),
)
@pytest.mark.slow
def test_never_below_min_rate(interval, p, i, d, min_rate, batches) -> None:
    pid = PIDRateEstimator(interval, p, i, d, min_rate)
    time = 0
    for step, elements, processing, scheduling in batches:
        time += step
        rate = pid.compute(time, elements, processing, scheduling)
        assert rate is None or rate >= min_rate


@settings(max_examples=300, deadline=None)
@given(
    interval=st.integers(min_value=1, max_value=60_000),
    p=gains,
    i=gains,
    elements=st.integers(min_value=1, max_value=10_000_000),
    steps=st.lists(st.integers(min_value=1, max_value=10 * 60_000), min_size=1, max_size=30),
)
@pytest.mark.slow
def test_the_fixed_point_keeps_the_rate(interval, p, i, elements, steps) -> None:
    """Processing time == batch interval, no scheduling delay, no derivative gain: the rate
    stays where it is (error, historical error and d_error are all zero)."""
    rate = elements / interval * 1000  # the batch held exactly one interval of the rate
    assume(rate >= 100.0)
    pid = PIDRateEstimator(interval, p, i, 0.0, 100.0)
    time = 1
    assert pid.compute(time, elements, interval, 0) is None
    for step in steps:
        time += step
        assert pid.compute(time, elements, interval, 0) == rate
