"""The arena's simulation: determinism, Spark's feeding rules, queueing, conservation, speed."""

from __future__ import annotations

import math
import time

import pytest

from sluice import estimators
from sluice.testing.arena import (
    Constant,
    CostModel,
    SimConfig,
    Source,
    Steps,
    get_scenario,
    run_arena,
    run_one,
    scenario_names,
    simulate,
)
from sluice.testing.arena.metrics import in_band


class Recorder:
    """An estimator that remembers its calls and answers a fixed rate (or a scripted value)."""

    def __init__(self, answers=None, rate: float = 5_000.0) -> None:
        self.calls: list[tuple] = []
        self.answers = list(answers or [])
        self.rate = rate

    def compute(self, time_ms, elements, processing_delay_ms, scheduling_delay_ms):
        self.calls.append((time_ms, elements, processing_delay_ms, scheduling_delay_ms))
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return self.rate


def test_same_seed_same_numbers():
    first = run_arena(seed=7)
    second = run_arena(seed=7)
    assert [r.metrics for r in first] == [r.metrics for r in second]
    assert [r.trace.batches for r in first] == [r.trace.batches for r in second]


def test_other_seed_other_noise():
    a = run_one("step_down", "pid", seed=1).trace.batches
    b = run_one("step_down", "pid", seed=2).trace.batches
    assert [x.processing_ms for x in a] != [x.processing_ms for x in b]


@pytest.mark.timing("tolerates 10 s for about 0.5 s alone: a load of ten and more on two cores")
def test_whole_arena_runs_in_seconds():
    started = time.perf_counter()
    results = run_arena(estimator_names=["pid", "adaptive", "constant"])
    elapsed = time.perf_counter() - started
    assert len(results) == 3 * len(scenario_names())
    assert elapsed < 10.0, f"the arena took {elapsed:.1f} s"  # ~0.5 s alone; the box is shared


def test_estimator_fed_like_spark_rate_controller():
    """time = processing end, whole ms; elements > 0 only; strictly increasing times."""
    model = CostModel(overhead_ms=100, cost_per_record_ms=0.1)
    source = Source(offered=Steps(8_000.0, ((3.0, 0.0), (6.0, 8_000.0))))  # a gap with no records
    recorder = Recorder()
    trace = simulate(model, source, SimConfig(batches=10, initial_rate=5_000), recorder)
    fed = [b for b in trace.batches if b.records > 0]
    assert len(recorder.calls) == len(fed) < len(trace.batches)
    for (time_ms, elements, processing, scheduling), batch in zip(recorder.calls, fed):
        assert all(isinstance(x, int) for x in (time_ms, elements, processing, scheduling))
        assert time_ms == round(batch.end_ms) and elements == batch.records > 0
        assert processing == round(batch.processing_ms) and scheduling == round(batch.scheduling_ms)
    times = [c[0] for c in recorder.calls]
    assert times == sorted(times) and len(set(times)) == len(times)


def test_fixed_trigger_queues_slow_batches():
    """A batch every interval whatever happens: each waits for the one before it."""
    model = CostModel(overhead_ms=100, cost_per_record_ms=0.25)  # 4,000 records/s at most
    trace = simulate(
        model, Source(offered=Constant(8_000.0)), SimConfig(batches=6, initial_rate=8_000), Recorder(rate=8_000)
    )
    for previous, batch in zip(trace.batches, trace.batches[1:]):
        assert batch.start_ms == max(batch.batch_time_ms, previous.end_ms)
        assert batch.scheduling_ms == pytest.approx(batch.start_ms - batch.batch_time_ms)
    delays = [b.scheduling_ms for b in trace.batches]
    assert delays == sorted(delays) and delays[-1] > 4 * 1000


def test_rate_limit_backlog_and_conservation():
    """Records not admitted stay upstream; nothing is created or lost."""
    source = Source(offered=Constant(10_000.0), initial_backlog=5_000)
    config = SimConfig(batches=8, initial_rate=2_000)
    trace = simulate(CostModel(), source, config, Recorder(rate=2_000))
    assert all(b.records <= 2_000 * 1.0 + 2_000 for b in trace.batches)  # rate x 1 s (+ stored burst)
    admitted = sum(b.records for b in trace.batches)
    arrived = 5_000 + 10_000 * 8
    assert admitted + trace.batches[-1].backlog_after == pytest.approx(arrived, abs=2)


def test_no_initial_rate_first_batch_takes_everything():
    scenario = get_scenario("cold_start")
    trace = run_one(scenario, "pid", slow_start=False).trace  # Spark's controller: no probe
    assert scenario.config.initial_rate is None
    assert trace.batches[0].records == 30_000 + 12_000  # the lag plus one interval's arrivals
    assert trace.batches[0].rate_limit is None


def test_published_rate_is_truncated_and_garbage_ignored():
    """rate.toLong; NaN, infinity, negative, raising: ignored and counted, the stream goes on."""
    answers = [4_321.9, math.nan, -5.0, math.inf, RuntimeError("boom"), None, 3_000.0]
    recorder = Recorder(answers=answers, rate=3_000.0)
    model = CostModel(overhead_ms=50, cost_per_record_ms=0.01)
    trace = simulate(
        model,
        Source(offered=Constant(10_000.0)),
        SimConfig(batches=9, initial_rate=6_000, publish_latency_ms=0),
        recorder,
    )
    assert trace.errors == 4
    assert trace.batches[1].rate_limit == 4_321.0  # published after batch 1, in force for batch 2
    assert all(b.rate_limit in (6_000.0, 4_321.0, 3_000.0) for b in trace.batches)


def test_capacity_of_the_models():
    linear = CostModel(overhead_ms=100, cost_per_record_ms=0.09)
    assert linear.capacity_records(1000, 0) == pytest.approx(10_000, rel=1e-6)
    cliff = get_scenario("gc_cliff").model
    assert cliff.capacity_records(1000, 0) == pytest.approx(7_000, rel=1e-6)
    assert get_scenario("step_down").model.capacity_records(1000, 61.0) == pytest.approx(6_111, rel=1e-3)
    assert get_scenario("spark_measured").model.capacity_records(1000, 0) == pytest.approx(7_500, rel=1e-6)


def test_in_band_definition():
    scenario = get_scenario("step_up")
    trace = run_one(scenario, "pid").trace
    for batch in trace.batches:
        expected = batch.scheduling_ms < 1000 and (
            abs(batch.processing_ms - 1000) <= 100
            or (batch.records >= batch.available_records - 1 and batch.processing_ms <= 1100)
        )
        assert in_band(batch, 1000) == expected


def test_any_registered_estimator_runs_by_name(install_plugin):
    """The arena builds estimators through ``estimators.create``: a plugin's name works too."""
    install_plugin(
        "test_fixed",
        """
        import pluggy

        class Fixed:
            def compute(self, time_ms, elements, processing_delay_ms, scheduling_delay_ms):
                return 7000.0

        @pluggy.HookimplMarker("sluice")
        def sluice_register_estimators():
            return {"test-fixed": lambda interval, options: Fixed()}
    """,
    )
    assert "test-fixed" in estimators.available()
    result = run_one("step_up", "test-fixed")
    assert result.metrics.estimator == "test-fixed"
    assert result.trace.batches[-1].rate_limit == 7_000.0


def test_unknown_names_are_named():
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        run_one("nope", "pid")
    with pytest.raises(ValueError, match="nope"):
        run_one("step_up", "nope")


@pytest.mark.parametrize("scenario", scenario_names())
def test_every_scenario_measures(scenario):
    for name in ("pid", "adaptive", "constant"):
        m = run_one(scenario, name).metrics
        assert m.batches == get_scenario(scenario).config.batches
        assert m.estimator_errors == 0
        assert 0.0 <= m.steady_utilization <= 1.0
        assert m.peak_scheduling_delay_intervals >= 0 and m.overshoot >= 0


class Observer(Recorder):
    """A Recorder that also opts into in-flight signals and answers them with nothing."""

    def __init__(self, rate: float = 5_000.0) -> None:
        super().__init__(rate=rate)
        self.events: list[tuple[str, float]] = []
        self.signals: list = []

    def compute(self, time_ms, elements, processing_delay_ms, scheduling_delay_ms):
        self.events.append(("compute", time_ms))
        return super().compute(time_ms, elements, processing_delay_ms, scheduling_delay_ms)

    def observe(self, signals):
        self.events.append(("observe", signals.time_ms))
        self.signals.append(signals)
        return None


def test_signals_come_in_time_order_and_tell_only_the_past():
    """Samples every 200 ms between completions, in time order with them; the running batch's
    elapsed time, the queue and the backlog are what had happened by then."""
    model = CostModel(overhead_ms=100, cost_per_record_ms=0.25)  # 4,000 records/s: a queue builds
    config = SimConfig(batches=8, initial_rate=6_000)
    observer = Observer(rate=6_000)
    trace = simulate(model, Source(offered=Constant(8_000.0)), config, observer)
    times = [t for _, t in observer.events]
    assert times == sorted(times)
    assert [t for kind, t in observer.events if kind == "observe"][:3] == [200, 400, 600]
    by_time = {b.batch_time_ms: b for b in trace.batches}
    for s in observer.signals:
        for running in s.running:
            batch = by_time[running.batch_time_ms]
            assert batch.start_ms <= s.time_ms < batch.end_ms
            assert running.elapsed_ms == s.time_ms - batch.start_ms and running.records == batch.records
        for queued in s.queued:
            batch = by_time[queued.batch_time_ms]
            assert queued.batch_time_ms <= s.time_ms < batch.start_ms and queued.records == batch.records
        assert s.backlog_records <= 6_000 and s.receiver_lag >= 0 and s.rate == 6_000
    assert any(len(s.queued) >= 2 for s in observer.signals)


def test_sampling_changes_nothing_for_an_estimator_that_answers_nothing():
    model = CostModel(overhead_ms=100, cost_per_record_ms=0.25, noise_sigma=0.05)
    args = (model, Source(offered=Constant(8_000.0)), SimConfig(batches=20, initial_rate=6_000))
    assert simulate(*args, Observer(), seed=3).batches == simulate(*args, Recorder(rate=5_000.0), seed=3).batches
