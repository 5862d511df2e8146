"""The latency target: any estimator's rate, scaled so batches leave records' latency under a target.  Pure.

Under the throughput target (the default, Spark's only one) an estimator sizes batches so that
processing fills the batch interval: the most records per second, and a record's latency up to
two intervals plus a block interval, more as soon as a capacity dip makes a batch overrun.  Under
the latency target the same estimator runs unchanged and its answer is scaled:

* a record waits up to one batch interval ``I`` (plus one block interval ``B`` in receiver mode:
  a block reaches a batch once it is complete) before its batch starts, then the batch's
  scheduling delay ``S``, then its processing;
* so to stay under a target ``T`` the processing of a batch has the budget
  ``P = (T - I - B) x (1 - SPREAD_MARGIN)``, at most ``I`` (the margin keeps the spread of
  processing times and the tick-to-start delay inside the target), and a batch sized to take
  ``P`` rather than ``I`` leaves the headroom that keeps a capacity dip from queueing;
* the rate becomes ``rate x (P - S) / I``: an estimator at its fixed point answers the rate that
  fills the interval, which this turns into batches taking ``P``; a scheduling delay is latency
  already spent, so it comes off the budget (never below ``DRAIN_FLOOR`` of it: a batch still
  measures the system).

The controller is model-based: it does not measure records' latency, it bounds it from the batch
timings every estimator already sees.  The estimator itself is not touched, so ``pid`` under the
throughput target stays Spark's, bit for bit (the wrapper is not even built then).
"""

from __future__ import annotations

import math
from dataclasses import replace
from numbers import Real
from typing import Any

from sluice.config_schema.rate_control import TARGETS
from sluice.errors import InvalidArgument
from sluice.estimators.base import InFlight, RateEstimator

__all__ = ["LatencyTarget", "SignalAwareLatencyTarget", "processing_budget_ms", "with_target", "SPREAD_MARGIN"]

SPREAD_MARGIN = 0.25  # of the slack past I + B, kept for the spread of processing and start times
DRAIN_FLOOR = 0.25  # the budget left after a scheduling delay is at least this share of the budget


def processing_budget_ms(target_latency_ms: float, batch_interval_ms: float, block_interval_ms: float = 0.0) -> float:
    """``P``: how long a batch may take so its records stay under the target (module docstring)."""
    slack = target_latency_ms - batch_interval_ms - block_interval_ms
    if not slack > 0:
        raise InvalidArgument(
            f"a latency target of {target_latency_ms:g} ms leaves no processing time: it must exceed the batch "
            f"interval plus the block interval ({batch_interval_ms + block_interval_ms:g} ms)"
        )
    return min(slack * (1 - SPREAD_MARGIN), float(batch_interval_ms))


class LatencyTarget:
    """``estimator``'s rates scaled to batches that take the processing budget (module docstring).

    :param estimator: any estimator; it sees every batch exactly as without the target.
    :param batch_interval_ms: the batch interval ``I``.
    :param target_latency_ms: the target ``T`` for records' end-to-end latency.
    :param block_interval_ms: ``B``: the receivers' block interval, 0 in direct mode.
    """

    def __init__(
        self,
        estimator: RateEstimator,
        batch_interval_ms: float,
        target_latency_ms: float,
        block_interval_ms: float = 0.0,
    ) -> None:
        self.estimator = estimator
        self.batch_interval_ms = float(batch_interval_ms)
        self.target_latency_ms = float(target_latency_ms)
        self.budget_ms = processing_budget_ms(target_latency_ms, batch_interval_ms, block_interval_ms)
        self.scale = self.budget_ms / self.batch_interval_ms  # the last batch's, for ``observe``

    def scale_for(self, scheduling_delay_ms: float) -> float:
        """The factor on the estimator's rate after a batch that waited ``scheduling_delay_ms``."""
        budget = max(self.budget_ms - max(0.0, scheduling_delay_ms), DRAIN_FLOOR * self.budget_ms)
        return budget / self.batch_interval_ms

    def compute(self, time_ms: int, elements: int, processing_delay_ms: int, scheduling_delay_ms: int) -> float | None:
        """The estimator's answer to the batch, scaled to the budget left after its scheduling delay."""
        self.scale = self.scale_for(scheduling_delay_ms)
        return self._scaled(self.estimator.compute(time_ms, elements, processing_delay_ms, scheduling_delay_ms))

    def _scaled(self, rate: Any) -> Any:
        """``rate x scale``, not under the estimator's floor; anything but a number passes untouched,
        for the controller to reject by its reason."""
        if isinstance(rate, bool) or not isinstance(rate, Real) or not math.isfinite(rate):
            return rate
        scaled = float(rate) * self.scale
        floor = self.min_rate
        return scaled if floor is None or scaled >= floor or rate <= 0 else floor

    @property
    def min_rate(self) -> float | None:
        """The estimator's floor (``pid.min_rate``): the scaled rate stays at or above it."""
        rate = getattr(self.estimator, "min_rate", None)
        return float(rate) if isinstance(rate, Real) and not isinstance(rate, bool) and float(rate) > 0 else None

    @property
    def last_terms(self) -> Any:
        """The estimator's own terms (the PID gauges show the estimator, unscaled)."""
        return getattr(self.estimator, "last_terms", None)

    def __repr__(self) -> str:
        return (
            f"LatencyTarget({self.estimator!r}, target_latency_ms={self.target_latency_ms:g}, "
            f"budget_ms={self.budget_ms:g})"
        )


class SignalAwareLatencyTarget(LatencyTarget):
    """The same for an estimator with ``observe``: it sees the rate in force in its own terms
    (unscaled) and its answer is scaled as the last completed batch's was."""

    def observe(self, signals: InFlight) -> float | None:
        inner = signals if signals.rate is None else replace(signals, rate=signals.rate / self.scale)
        return self._scaled(self.estimator.observe(inner))  # type: ignore[attr-defined]  # checked by with_target


def with_target(
    estimator: RateEstimator,
    target: str,
    batch_interval_ms: float,
    target_latency_ms: float,
    block_interval_ms: float = 0.0,
) -> RateEstimator:
    """``estimator`` itself under the throughput target, wrapped under the latency target."""
    if target not in TARGETS:
        raise InvalidArgument(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    if target == "throughput":
        return estimator
    kind = SignalAwareLatencyTarget if callable(getattr(estimator, "observe", None)) else LatencyTarget
    return kind(estimator, batch_interval_ms, target_latency_ms, block_interval_ms)
