"""An example Sluice estimator plugin: AIMD (additive increase, multiplicative decrease).

Sluice loads this module through the ``sluice`` entry-point group and calls the pluggy hook
``sluice_register_estimators()``; each factory it returns takes ``(batch_interval_ms, options)``
and builds an object with ``compute(time_ms, elements, processing_delay_ms, scheduling_delay_ms)``.

AIMD is TCP's congestion rule: while batches finish within the interval and wait for nothing, the
rate climbs by a fixed step; as soon as one overruns or queues, the rate is cut by a factor. It
reacts to a capacity drop within one batch, which the PID estimator's fixed-capacity assumption
does not, at the price of a saw-tooth in steady state.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pluggy

# The marker is made from the project name, so the plugin needs no import of Sluice itself.
hookimpl = pluggy.HookimplMarker("sluice")

__all__ = ["AIMDRateEstimator", "sluice_register_estimators"]


class AIMDRateEstimator:
    """Rate += ``increase`` per healthy batch; rate *= ``decrease`` when a batch overran or waited."""

    def __init__(
        self,
        batch_interval_ms: int,
        increase: float = 200.0,
        decrease: float = 0.5,
        min_rate: float = 100.0,
        initial_rate: float | None = None,
    ) -> None:
        if batch_interval_ms <= 0:
            raise ValueError(f"batch_interval_ms must be above 0, got {batch_interval_ms}")
        if increase <= 0:
            raise ValueError(f"aimd option increase must be above 0, got {increase}")
        if not 0 < decrease < 1:
            raise ValueError(f"aimd option decrease must be between 0 and 1 (exclusive), got {decrease}")
        if min_rate <= 0:
            raise ValueError(f"aimd option min_rate must be above 0, got {min_rate}")
        self.batch_interval_ms = batch_interval_ms
        self.increase, self.decrease, self.min_rate = increase, decrease, min_rate
        self.rate: float | None = initial_rate
        self.latest_time = -1

    def compute(self, time_ms: int, elements: int, processing_delay_ms: int, scheduling_delay_ms: int) -> float | None:
        """The new rate in records/s, or None when this batch says nothing new (as PID does)."""
        if time_ms <= self.latest_time or elements <= 0 or processing_delay_ms <= 0:
            return None
        self.latest_time = time_ms
        processing_rate = elements / processing_delay_ms * 1000
        if self.rate is None or not math.isfinite(self.rate):
            self.rate = processing_rate  # first batch: start from what was just achieved
            return None
        overloaded = processing_delay_ms > self.batch_interval_ms or (scheduling_delay_ms or 0) > 0
        if overloaded:
            self.rate = max(min(self.rate, processing_rate) * self.decrease, self.min_rate)
        else:
            self.rate = self.rate + self.increase
        return self.rate


def _factory(batch_interval_ms: int, options: dict[str, Any]) -> AIMDRateEstimator:
    known = {"increase", "decrease", "min_rate", "initial_rate"}
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"aimd does not know the option(s) {sorted(unknown)}; it takes {sorted(known)}")
    return AIMDRateEstimator(batch_interval_ms, **{k: float(v) for k, v in options.items()})


@hookimpl
def sluice_register_estimators() -> dict[str, Callable[[int, dict[str, Any]], AIMDRateEstimator]]:
    """Sluice's plugin hook: the names this plugin adds to ``--estimator``."""
    return {"aimd": _factory}
