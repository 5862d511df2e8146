"""Slow start: the probe before the estimator's first estimate, alone and behind a RateController
and the driver's RateLoop (manual clock; no Spark, no sleeps)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sluice.clock import ManualClock
from sluice.estimators import PIDRateEstimator, RateController
from sluice.estimators.adaptive import AdaptiveRateEstimator
from sluice.estimators.base import InFlight, RunningBatch
from sluice.estimators.slow_start import REASONS, SlowStart, first_probe
from sluice.spark_driver.rate_loop import RateLoop
from tests.driver.fakes import MemorySource


@dataclass(frozen=True)
class Info:
    processing_end_ms: int
    num_records: int
    processing_delay_ms: int
    scheduling_delay_ms: int


@pytest.mark.parametrize(
    ("ceiling", "first"),
    [
        (50_000.0, 3_125.0),  # 10x a 5,000/s capacity: starts at 0.625x, not 10x
        (5_000.0, 2_000.0),  # 1x: a sixteenth would be 312.5, under 20 x the minimum rate
        (500.0, 500.0),  # 0.1x: never over the ceiling
        (None, 2_000.0),  # no initial rate: 20 x the minimum rate
    ],
)
def test_the_first_probe_is_small_and_never_over_the_ceiling(ceiling, first) -> None:
    assert first_probe(ceiling, 100.0) == first


def test_the_probe_doubles_while_batches_finish_inside_the_interval_up_to_the_ceiling() -> None:
    probe = SlowStart(1000, 20_000.0, 100.0)
    rates = [probe.rate]
    for _ in range(4):
        rates.append(probe.settle(None, 1_000, 400, 0)[0])
    assert rates == [2_000.0, 4_000.0, 8_000.0, 16_000.0, 20_000.0]
    assert probe.settle(None, 1_000, 400, 0) == (20_000.0, "slow_start_grow") and probe.active


def test_an_overrun_ends_the_probe_and_the_estimator_decides() -> None:
    probe = SlowStart(1000, 20_000.0, 100.0)
    assert probe.settle(None, 1_000, 900, 200) is None  # scheduling + processing over the interval
    assert not probe.active
    assert probe.settle(None, 1_000, 100, 0) is None  # over: no more growth
    assert probe.settle(700.0, 1_000, 100, 0) == (700.0, "estimate")


def test_the_probe_grows_over_an_estimate_under_the_rate_in_force_and_ends_at_one_above() -> None:
    probe = SlowStart(1000, None, 100.0)
    assert probe.settle(1_500.0, 200, 50, 0) == (4_000.0, "slow_start_grow")  # a batch too small to tell
    assert probe.settle(5_000.0, 2_000, 250, 0) == (5_000.0, "estimate") and not probe.active  # under 8,000


def test_an_empty_batch_proves_nothing() -> None:
    probe = SlowStart(1000, None, 100.0)
    assert probe.settle(None, 0, 5, 0) is None and probe.rate == 2_000.0 and probe.active


def test_the_pid_behind_a_controller_grows_on_its_seed_batch_then_answers_bit_identically() -> None:
    published: list[float] = []
    ctl = RateController(PIDRateEstimator(1000), published.append, slow_start=SlowStart(1000, 50_000.0, 100.0))
    assert ctl.begin(0) == 3_125.0
    assert ctl.on_batch_completed(Info(1_000, 0, 1, 0)) is None  # empty: the PID and the probe say nothing
    assert ctl.on_batch_completed(Info(2_000, 3_000, 600, 0)) == 6_250.0  # seed batch, inside the interval
    assert ctl.latest_rate() is None  # a probe is not an estimate
    reference = PIDRateEstimator(1000)
    reference.compute(2_000, 3_000, 600, 0)
    expected = reference.compute(3_000, 6_000, 1_200, 200)
    assert ctl.on_batch_completed(Info(3_000, 6_000, 1_200, 200)) == expected  # overran: the PID decides
    assert published == [3_125.0, 6_250.0, expected]
    assert [d.reason for d in ctl.decisions] == ["slow_start", "slow_start_grow", "estimate"]
    assert all(d.reason in REASONS for d in ctl.decisions)


def test_an_in_flight_cut_ends_the_probe_at_once() -> None:
    published: list[float] = []
    probe = SlowStart(1000, 50_000.0, 100.0)
    ctl = RateController(AdaptiveRateEstimator(1000), published.append, slow_start=probe)
    ctl.begin(0)
    running = InFlight(2_500.0, running=(RunningBatch(1_000, 3_125, 1_500.0),), rate=3_125.0)
    cut = ctl.on_in_flight(running)
    assert cut is not None and cut < 3_125.0 and not probe.active
    assert ctl.last_decision is not None and ctl.last_decision.reason == "in_flight_cut"


def _loop(last_rate: float | None = None, slow_start: bool = True) -> tuple[RateLoop, MemorySource, ManualClock]:
    source, clock = MemorySource(last_rate=last_rate), ManualClock(5_000)
    loop = RateLoop(
        source, (0,), batch_interval_ms=1000, estimator="pid", initial_rate=50_000.0, slow_start=slow_start, clock=clock
    )
    return loop, source, clock


def test_the_driver_starts_with_the_probe_and_keeps_every_decision() -> None:
    loop, source, _ = _loop()
    loop.start()
    assert source.published == [(0, 3_125.0)] and loop.current_rate() == 3_125.0
    assert [(d.time_ms, d.rate, d.reason) for d in loop.decisions()] == [(5_000.0, 3_125.0, "slow_start")]


def test_a_remembered_rate_skips_the_probe_and_slow_start_off_trusts_the_initial_rate() -> None:
    loop, source, _ = _loop(last_rate=7_000.0)
    loop.start()
    assert source.published == [] and loop.current_rate() == 7_000.0
    assert [d.reason for d in loop.decisions()] == ["resume"]
    assert not loop.controllers[0].slow_start.active
    loop, source, _ = _loop(slow_start=False)
    loop.start()
    assert source.published == [(0, 50_000.0)] and [d.reason for d in loop.decisions()] == ["initial"]
