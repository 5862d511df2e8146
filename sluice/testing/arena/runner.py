"""Run scenarios x estimators, by name, through the same ``sluice.estimators.create`` the driver uses.

Going through ``create`` (not importing classes) is the point: a plugin registered under the
``sluice`` entry-point group enters the arena exactly as it would enter a real stream, with the
same option validation, so "it won in the arena" means the thing the driver would build.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sluice.testing.arena.metrics import Metrics, measure
from sluice.testing.arena.scenarios import SCENARIOS, Scenario, get_scenario
from sluice.testing.arena.sim import Trace, simulate

__all__ = ["Result", "run_one", "run_arena", "DEFAULT_ESTIMATORS"]

DEFAULT_ESTIMATORS = ("pid", "adaptive", "constant")


@dataclass(frozen=True)
class Result:
    trace: Trace
    metrics: Metrics


def default_options(name: str, scenario: Scenario) -> dict[str, Any]:
    """Options the arena gives an estimator when the caller gives none.

    Only ``constant`` needs one (it has no default rate): it runs at the initial rate, or at
    the initial capacity when the scenario has none, i.e. a well-meaning static limit.
    """
    if name == "constant":
        rate = scenario.config.initial_rate
        if rate is None:
            rate = (
                scenario.model.capacity_records(scenario.config.batch_interval_ms, 0.0)
                * 1000
                / scenario.config.batch_interval_ms
            )
        return {"rate": rate}
    return {}


def run_one(
    scenario: Scenario | str,
    estimator: str,
    *,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    slow_start: bool = True,
) -> Result:
    """One scenario driven by a freshly created estimator ``estimator``, behind Sluice's controller
    (its slow start on, as the driver's default) or Spark's (``slow_start=False``)."""
    from sluice import estimators  # at call time: plugins registered after import still count

    if isinstance(scenario, str):
        scenario = get_scenario(scenario)
    opts = dict(options) if options is not None else default_options(estimator, scenario)
    instance = estimators.create(estimator, scenario.config.batch_interval_ms, opts)
    trace = simulate(
        scenario.model,
        scenario.source,
        replace(scenario.config, slow_start=slow_start),
        instance,
        seed=seed,
        scenario=scenario.name,
        estimator_name=estimator,
    )
    metrics = measure(trace, change_times_s=scenario.change_times_s, min_rate=scenario.min_rate)
    return Result(trace, metrics)


def run_arena(
    scenarios: Iterable[str] | None = None,
    estimator_names: Iterable[str] = DEFAULT_ESTIMATORS,
    *,
    seed: int = 0,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Result]:
    """Every scenario x estimator, scenario-major (the order tables and plots use)."""
    names = list(estimator_names)
    results = []
    for scenario_name in list(scenarios) if scenarios is not None else list(SCENARIOS):
        scenario = get_scenario(scenario_name)
        for name in names:
            opts = (options or {}).get(name)
            results.append(run_one(scenario, name, seed=seed, options=opts))
    return results
