"""The latency target, on numbers: the budget, the scaling of any estimator, the scheduling-delay cut,
and a throughput target that leaves the estimator (Spark's PID) untouched."""

from __future__ import annotations

import random

import pytest

from sluice.config import ConfigError, resolve
from sluice.config_schema.rate_control import check_target
from sluice.errors import InvalidArgument
from sluice.estimators import ConstantEstimator, PIDRateEstimator, RateController, create
from sluice.estimators.base import InFlight
from sluice.estimators.latency import (
    SPREAD_MARGIN,
    LatencyTarget,
    SignalAwareLatencyTarget,
    processing_budget_ms,
    with_target,
)
from sluice.estimators.slow_start import SlowStart
from sluice.spark_driver.rate_loop import RateLoop
from sluice.spark_driver.receiver_source import ReceiverSource
from sluice.spark_driver.source import SourceContext
from tests.driver.fakes import MemorySource


def test_budget_is_the_slack_past_the_wait_less_the_margin_and_at_most_the_interval() -> None:
    # 2,000 ms target, 1 s batches, 200 ms blocks: 800 ms of slack, a quarter kept for the spread
    assert processing_budget_ms(2000, 1000, 200) == pytest.approx(800 * (1 - SPREAD_MARGIN)) == 600
    assert processing_budget_ms(1000, 500, 0) == 375  # direct mode: no block to wait for
    assert processing_budget_ms(60_000, 1000, 200) == 1000  # a loose target: fill the interval
    with pytest.raises(InvalidArgument, match="must exceed the batch interval plus the block interval \\(1200 ms\\)"):
        processing_budget_ms(1200, 1000, 200)


def test_rate_is_scaled_to_the_budget() -> None:
    wrapped = LatencyTarget(
        ConstantEstimator(10_000), batch_interval_ms=1000, target_latency_ms=2000, block_interval_ms=200
    )
    assert wrapped.budget_ms == 600
    assert wrapped.compute(1000, 5000, 500, 0) == pytest.approx(6000)  # 10,000/s x 600 / 1000


def test_scheduling_delay_is_budget_already_spent() -> None:
    wrapped = LatencyTarget(
        ConstantEstimator(10_000), batch_interval_ms=1000, target_latency_ms=2000, block_interval_ms=200
    )
    assert wrapped.compute(1000, 5000, 500, 240) == pytest.approx(3600)  # (600 - 240) / 1000
    # a queue longer than the budget cuts to a quarter of it, not to nothing
    assert wrapped.compute(2000, 5000, 500, 5000) == pytest.approx(10_000 * 0.25 * 600 / 1000)
    assert wrapped.compute(3000, 5000, 500, 0) == pytest.approx(6000)  # the queue gone, the budget back


def test_scaled_rate_stays_at_or_above_the_estimators_floor() -> None:
    pid = PIDRateEstimator(1000, min_rate=100)
    wrapped = LatencyTarget(pid, batch_interval_ms=1000, target_latency_ms=1500, block_interval_ms=200)
    wrapped.compute(1000, 1000, 1000, 0)  # the PID's first batch: a reference, no answer
    assert wrapped.compute(2000, 10, 1000, 60_000) == 100  # the PID at its floor stays there, not 100 x 0.06


def test_an_answer_that_is_not_a_rate_reaches_the_controller_unchanged() -> None:
    class Broken:
        def __init__(self, *answers: object) -> None:
            self.answers = list(answers)

        def compute(self, *_: int) -> object:
            return self.answers.pop(0)

    wrapped = LatencyTarget(Broken("fast", float("nan"), None), 1000, 2000)  # type: ignore[arg-type]
    controller = RateController(wrapped, None, stream="latency-broken")
    for t in (1, 2, 3):
        controller.on_batch_completed(_Info(t, 10, 5, 0))
    assert controller.failures == {"not_a_number": 1, "nan": 1}


def test_throughput_target_is_the_estimator_itself_so_pid_stays_sparks() -> None:
    pid = PIDRateEstimator(1000)
    assert with_target(pid, "throughput", 1000, 2000, 200) is pid
    # and the wrapped PID sees every batch exactly as the bare one does: the same sequence, scaled
    bare, inner = PIDRateEstimator(1000), PIDRateEstimator(1000)
    wrapped = with_target(inner, "latency", 1000, 2000, 200)
    rng = random.Random(7)
    for t in range(1, 60):
        batch = (t * 1000, rng.randint(1, 20_000), rng.randint(1, 3000), 0)
        expected = bare.compute(*batch)
        got = wrapped.compute(*batch)
        assert (got is None) == (expected is None)
        if expected is not None and got is not None:
            assert got == max(expected * 0.6, bare.min_rate)
    assert bare.latest_rate == inner.latest_rate  # the PID's own state never sees the scaling


def test_an_estimator_with_observe_keeps_it_in_its_own_terms() -> None:
    class Observing(ConstantEstimator):
        seen: float | None = None

        def observe(self, signals: InFlight) -> float | None:
            self.seen = signals.rate
            return 3000.0

    inner = Observing(5000)
    wrapped = with_target(inner, "latency", 1000, 2000, 200)
    assert isinstance(wrapped, SignalAwareLatencyTarget)
    assert not hasattr(with_target(ConstantEstimator(1), "latency", 1000, 2000), "observe")
    assert wrapped.observe(InFlight(time_ms=0.0, rate=3000.0)) == pytest.approx(3000 * 0.6)
    assert inner.seen == pytest.approx(5000)  # 3,000 published is 5,000 in the estimator's terms


def test_unknown_target_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="target must be one of throughput, latency, got 'fast'"):
        with_target(ConstantEstimator(1), "fast", 1000, 2000)


# -- the configuration ---------------------------------------------------------------------------


def test_config_refuses_an_unknown_target_naming_the_allowed_ones() -> None:
    with pytest.raises(ConfigError) as err:
        resolve(["backpressure"], flags={"backpressure.target": "latncy"}, environ={})
    assert str(err.value) == (
        "backpressure.target = 'latncy' (from flag --backpressure-target) is not allowed: "
        "expected one of throughput, latency; did you mean 'latency'?"
    )


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "soon"])
def test_config_refuses_a_target_latency_that_is_not_a_positive_integer(value: str) -> None:
    with pytest.raises(ConfigError, match="expected an integer above 0"):
        resolve(["backpressure"], environ={"SLUICE_BACKPRESSURE_TARGET_LATENCY_MS": value})


def test_config_refuses_a_latency_target_the_wait_alone_exceeds_naming_the_smallest() -> None:
    with pytest.raises(ConfigError) as err:
        check_target("latency", 1200, 1000, 200)
    assert "backpressure.target_latency_ms = 1200 is not allowed" in str(err.value)
    assert "expected at least 1201" in str(err.value)
    check_target("latency", 1201, 1000, 200)
    check_target("latency", 600, 500, 0)  # direct mode: no block interval
    check_target("throughput", 1, 1000, 200)  # not used: not checked


def test_rate_loop_refuses_it_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match="expected at least 701"):
        RateLoop(None, (0,), batch_interval_ms=500, target="latency", target_latency_ms=700, block_interval_ms=200)


def test_rate_loop_wraps_under_the_latency_target_and_probes_inside_the_budget() -> None:
    loop = RateLoop(
        None,
        (0,),
        batch_interval_ms=500,
        target="latency",
        target_latency_ms=1000,
        block_interval_ms=100,
    )
    controller = loop.controllers[0]
    assert isinstance(controller.estimator, LatencyTarget)
    assert isinstance(controller.slow_start, SlowStart)
    assert controller.slow_start.batch_interval_ms == 300  # (1000 - 500 - 100) x 0.75
    plain = RateLoop(None, (0,), batch_interval_ms=500)
    assert isinstance(plain.controllers[0].estimator, PIDRateEstimator)
    assert plain.controllers[0].slow_start.batch_interval_ms == 500


def test_queued_blocks_drain_at_the_rate_that_fills_the_interval_while_receivers_keep_the_budget() -> None:
    """Receivers admit at the budget's rate; a batch of queued blocks may take the rate that fills
    the interval, or what a step left queued at the tracker would never drain (bounded batches)."""
    loop = RateLoop(
        MemorySource(), (0,), batch_interval_ms=500, target="latency", target_latency_ms=1000, block_interval_ms=100
    )
    loop.controllers[0].start_at(0, 1800.0)  # a rate published through the stream's controller
    assert loop.current_rate(0) == 1800.0
    assert loop.capacity_rate(0) == pytest.approx(3000.0)  # 1,800 x 500 / 300
    source = ReceiverSource("127.0.0.1:1")
    source.context = SourceContext(None, 500, (0,), current_rate=loop.current_rate, capacity_rate=loop.capacity_rate)
    assert source.max_records() == {0: 1650}  # 3,000/s x 0.5 s x 1.1, not 1,800's 990
    plain = RateLoop(MemorySource(), (0,), batch_interval_ms=500)
    plain.controllers[0].start_at(0, 1800.0)
    assert plain.capacity_rate(0) == plain.current_rate(0) == 1800.0


# -- closed loop on numbers: a capacity step ------------------------------------------------------


def _latencies(estimator: str, target: str, steps: int = 80) -> list[float]:
    """A saturated source, 500 ms batches, 100 ms blocks, capacity 5,000/s dropping to 3,000/s at
    batch 30, ``estimator`` behind the controller; the worst latency of each batch's records
    (interval + block + scheduling delay + processing), after the step settled."""
    interval, block = 500, 100
    controller = RateController(with_target(create(estimator, interval, {}), target, interval, 1000, block), None)
    rate, free_at, worst = 2000.0, 0.0, []
    for n in range(steps):
        capacity = 5000 if n < 30 else 3000
        start = max(n * interval, free_at)
        processing = rate * interval / 1000 / capacity * 1000 + 5  # 5 ms per batch of overhead
        free_at = start + processing
        scheduling = start - n * interval
        new = controller.on_batch_completed(
            _Info(int(free_at), int(rate * interval / 1000), int(processing), int(scheduling))
        )
        rate = new if new is not None else rate
        if n >= 45:
            worst.append(interval + block + scheduling + processing)
    return worst


@pytest.mark.parametrize("estimator", ["pid", "adaptive"])
def test_after_a_capacity_step_the_latency_target_holds_and_the_throughput_one_does_not(estimator: str) -> None:
    latency, throughput = _latencies(estimator, "latency"), _latencies(estimator, "throughput")
    assert max(latency) < 1000, latency
    assert min(throughput) > 1000, throughput  # filling the interval: 500 + 100 + ~500 ms


class _Info:
    """The attributes RateController reads from a BatchInfo."""

    def __init__(self, end: int, records: int, processing: int, scheduling: int) -> None:
        self.processing_end_ms = end
        self.num_records = records
        self.processing_delay_ms = processing
        self.scheduling_delay_ms = scheduling
