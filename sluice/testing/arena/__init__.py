"""The estimator arena: a seeded simulation of Spark's micro-batch pipeline that judges estimators.

``run_arena(scenarios, estimators, seed=...)`` runs each named scenario (``scenarios.py``) with
each estimator built by name through ``sluice.estimators.create`` (plugins included) and returns
traces and the figures that judge an estimator (``metrics.py``).  ``bench/arena.py`` is its command line;
``plot.py`` draws the curves; ``calibration.py`` compares the model with a real run's trace.

It is a research tool beside the estimators, not part of them: no service imports it, so the
estimators' package loads no simulator and no matplotlib.
"""

from __future__ import annotations

from sluice.testing.arena.metrics import Metrics, measure
from sluice.testing.arena.model import Constant, CostModel, Periodic, Source, Steps
from sluice.testing.arena.runner import DEFAULT_ESTIMATORS, Result, run_arena, run_one
from sluice.testing.arena.scenarios import SCENARIOS, Scenario, get_scenario, scenario_names
from sluice.testing.arena.sim import BatchTrace, SimConfig, Trace, simulate

__all__ = [
    "Metrics",
    "measure",
    "Constant",
    "CostModel",
    "Periodic",
    "Source",
    "Steps",
    "DEFAULT_ESTIMATORS",
    "Result",
    "run_arena",
    "run_one",
    "SCENARIOS",
    "Scenario",
    "get_scenario",
    "scenario_names",
    "BatchTrace",
    "SimConfig",
    "Trace",
    "simulate",
]
