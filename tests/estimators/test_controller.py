"""RateController: publishes good rates; a bad estimator never stops anything."""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass

import pytest

from sluice.estimators import ConstantEstimator, PIDRateEstimator, RateController
from sluice.estimators.metrics import REGISTRY


@dataclass(frozen=True)
class Info:
    """The duck-typed attributes RateController reads from spark_driver.batch.BatchInfo."""

    processing_end_ms: int | None
    num_records: int | None
    processing_delay_ms: int | None
    scheduling_delay_ms: int | None


class Scripted:
    """Returns (or raises) the scripted outcomes in order, then 500.0."""

    def __init__(self, *outcomes) -> None:
        self.outcomes, self.calls = list(outcomes), []

    def compute(self, time_ms, elements, processing_delay_ms, scheduling_delay_ms):
        self.calls.append((time_ms, elements, processing_delay_ms, scheduling_delay_ms))
        outcome = self.outcomes.pop(0) if self.outcomes else 500.0
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def stream() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"  # fresh label: tests stay independent on the registry


def sample(name: str, **labels) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def batch(t: int = 1000) -> Info:
    return Info(t, 1000, 500, 0)


def test_pid_rates_are_published_from_the_second_batch() -> None:
    published, s = [], stream()
    ctl = RateController(PIDRateEstimator(1000), published.append, stream=s)
    assert ctl.latest_rate() is None
    assert ctl.on_batch_completed(Info(1000, 1000, 500, 0)) is None  # first call: reference
    assert ctl.latest_rate() is None and published == []
    assert ctl.on_batch_completed(Info(2000, 1000, 1000, 500)) == 900.0
    assert published == [900.0] and ctl.latest_rate() == 900.0
    assert sample("sluice_estimated_rate", stream=s) == 900.0
    assert sample("sluice_rate_estimates_total", stream=s) == 1.0
    assert sample("sluice_pid_error", stream=s) == 1000.0
    assert sample("sluice_pid_historical_error", stream=s) == 500.0
    assert sample("sluice_pid_derivative_error", stream=s) == 1000.0
    assert sample("sluice_pid_processing_rate", stream=s) == 1000.0


def test_time_is_the_processing_end_and_unknown_delays_skip() -> None:
    est = Scripted()
    ctl = RateController(est, None, stream=stream())
    for info in (Info(None, 1, 1, 0), Info(5, None, 1, 0), Info(5, 1, None, 0), Info(5, 1, 1, None)):
        assert ctl.on_batch_completed(info) is None
    assert est.calls == []
    assert ctl.on_batch_completed(Info(7000, 10, 20, 30)) == 500.0
    assert est.calls == [(7000, 10, 20, 30)]


@pytest.mark.parametrize(
    "bad, reason",
    [
        (RuntimeError("boom"), "exception"),
        (math.nan, "nan"),
        (math.inf, "infinite"),
        (-math.inf, "infinite"),
        (10**400, "infinite"),
        (0.0, "zero"),
        (0, "zero"),
        (-12.5, "negative"),
        ("fast", "not_a_number"),
        (True, "not_a_number"),
    ],
)
def test_a_bad_estimate_keeps_the_last_good_rate(bad, reason, caplog) -> None:
    s, published = stream(), []
    ctl = RateController(Scripted(700.0, bad, bad, bad, 800.0), published.append, stream=s)
    with caplog.at_level(logging.DEBUG, logger="sluice.estimators.controller"):
        assert ctl.on_batch_completed(batch(1000)) == 700.0
        for t in (2000, 3000, 4000):
            assert ctl.on_batch_completed(batch(t)) is None  # nothing raised to the caller
            assert ctl.latest_rate() == 700.0  # last good rate stays
        assert ctl.on_batch_completed(batch(5000)) == 800.0  # and recovery is immediate
    assert published == [700.0, 800.0]
    assert ctl.failures == {reason: 3}
    assert sample("sluice_estimator_failures_total", stream=s, reason=reason) == 3.0
    assert sample("sluice_estimated_rate", stream=s) == 800.0
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1  # once per kind, not per batch
    assert f"stream {s}" in errors[0].getMessage() and reason in errors[0].getMessage()
    assert (errors[0].exc_info is not None) == (reason == "exception")


def test_each_kind_is_logged_once(caplog) -> None:
    s = stream()
    outcomes = [math.nan, -1.0, math.nan, ValueError("x"), -1.0, ValueError("y"), math.nan]
    ctl = RateController(Scripted(*outcomes), lambda rate: None, stream=s)
    with caplog.at_level(logging.ERROR, logger="sluice.estimators.controller"):
        for t in range(len(outcomes)):
            ctl.on_batch_completed(batch(1000 * (t + 1)))
    assert ctl.failures == {"nan": 3, "negative": 2, "exception": 2}
    assert len(caplog.records) == 3
    assert ctl.latest_rate() is None  # never a good rate: still none
    assert sample("sluice_estimator_failures_total", stream=s, reason="infinite") == 0.0  # exists


def test_truncate_is_sparks_to_long() -> None:
    published = []
    ctl = RateController(Scripted(900.9, 0.5, 1e30), published.append, stream=stream(), truncate=True)
    assert ctl.on_batch_completed(batch(1000)) == 900.0
    assert ctl.on_batch_completed(batch(2000)) is None and ctl.failures == {"zero": 1}
    assert ctl.on_batch_completed(batch(3000)) == float(2**63 - 1)  # Long.MaxValue saturation
    assert published == [900.0, float(2**63 - 1)]
    assert RateController(ConstantEstimator(0.5), None).on_batch_completed(batch()) == 0.5  # default


def test_publish_failure_keeps_going(caplog) -> None:
    s, calls = stream(), []

    def publish(rate: float) -> None:
        calls.append(rate)
        if len(calls) < 3:
            raise ConnectionError("tracker away")

    ctl = RateController(ConstantEstimator(250), publish, stream=s)
    with caplog.at_level(logging.ERROR, logger="sluice.estimators.controller"):
        for t in (1000, 2000, 3000):
            assert ctl.on_batch_completed(batch(t)) == 250.0
    assert calls == [250.0, 250.0, 250.0] and ctl.latest_rate() == 250.0
    assert sample("sluice_rate_publish_failures_total", stream=s) == 2.0
    assert len(caplog.records) == 1


def test_a_failed_publish_leaves_the_rate_in_force_and_the_receivers_at_the_last_accepted_one() -> None:
    s, calls = stream(), []

    def publish(rate: float) -> None:
        calls.append(rate)
        if rate == 600.0:
            raise ConnectionError("tracker away")

    ctl = RateController(Scripted(500.0, 600.0, 700.0), publish, stream=s)
    ctl.start_at(0, 400.0)
    assert (ctl.rate_in_force(), ctl.published_rate(), ctl.latest_rate()) == (400.0, 400.0, None)
    ctl.on_batch_completed(batch(1000))
    assert (ctl.rate_in_force(), ctl.published_rate()) == (500.0, 500.0)
    ctl.on_batch_completed(batch(2000))  # publish fails: in force (Spark's rateLimit), not accepted
    assert (ctl.rate_in_force(), ctl.published_rate(), ctl.latest_rate()) == (600.0, 500.0, 600.0)
    ctl.on_batch_completed(batch(3000))
    assert (ctl.rate_in_force(), ctl.published_rate()) == (700.0, 700.0)
    assert calls == [400.0, 500.0, 600.0, 700.0]
    assert [d.reason for d in ctl.decisions] == ["initial", "estimate", "estimate", "estimate"]


def test_a_resumed_rate_is_in_force_and_published_without_a_publish() -> None:
    calls: list[float] = []
    ctl = RateController(ConstantEstimator(42), calls.append, stream=stream())
    ctl.resume(5, 300.0)
    assert (ctl.rate_in_force(), ctl.published_rate(), ctl.latest_rate()) == (300.0, 300.0, None)
    assert calls == [] and [(d.time_ms, d.rate, d.reason) for d in ctl.decisions] == [(5.0, 300.0, "resume")]


def test_publish_failures_are_logged_again_after_a_publish_succeeded(caplog) -> None:
    outcomes = [True, True, False, True]

    def publish(rate: float) -> None:
        if outcomes.pop(0):
            raise ConnectionError("tracker away")

    ctl = RateController(ConstantEstimator(250), publish, stream=stream())
    with caplog.at_level(logging.ERROR, logger="sluice.estimators.controller"):
        for t in (1000, 2000, 3000, 4000):
            ctl.on_batch_completed(batch(t))
    assert len(caplog.records) == 2  # one per outage, not per batch
    assert all(r.exc_info is None for r in caplog.records)  # the tracker away: one line, no traceback


def test_a_coroutine_publish_is_refused_when_the_controller_is_built() -> None:
    from sluice.errors import InvalidArgumentType

    async def publish(rate: float) -> None:  # pragma: no cover - never called
        raise AssertionError

    with pytest.raises(InvalidArgumentType, match="coroutine function"):
        RateController(ConstantEstimator(42), publish, stream=stream())  # type: ignore[arg-type]  # the mistake it refuses


class ScriptedObserver(Scripted):
    """Scripted, plus ``observe`` answering from its own script: an estimator that opts in."""

    def __init__(self, *observed) -> None:
        super().__init__()
        self.observed = list(observed)
        self.signals: list = []

    def observe(self, signals):
        self.signals.append(signals)
        outcome = self.observed.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def test_in_flight_signals_reach_only_an_estimator_that_opts_in() -> None:
    from sluice.estimators.base import InFlight

    published = []
    pid = RateController(PIDRateEstimator(1000), published.append, stream=stream())
    assert not pid.wants_signals and pid.on_in_flight(InFlight(1_000)) is None
    observer = ScriptedObserver(None, 450.0)
    ctl = RateController(observer, published.append, stream=stream())
    assert ctl.wants_signals
    assert ctl.on_in_flight(InFlight(1_000)) is None  # said nothing: nothing published
    assert ctl.on_in_flight(InFlight(1_200)) == 450.0
    assert published == [450.0] and ctl.latest_rate() == 450.0
    assert [s.time_ms for s in observer.signals] == [1_000, 1_200]


def test_a_bad_answer_to_signals_is_guarded_like_a_bad_estimate() -> None:
    from sluice.estimators.base import InFlight

    s, published = stream(), []
    ctl = RateController(ScriptedObserver(math.nan, RuntimeError("boom"), -3.0), published.append, stream=s)
    assert ctl.on_batch_completed(batch(1000)) == 500.0
    for t in (1_100, 1_200, 1_300):
        assert ctl.on_in_flight(InFlight(t)) is None
    assert ctl.latest_rate() == 500.0 and published == [500.0]
    assert ctl.failures == {"nan": 1, "exception": 1, "negative": 1}
    assert sample("sluice_estimator_failures_total", stream=s, reason="exception") == 1.0
