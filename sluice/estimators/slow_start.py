"""Slow start: the rates a stream runs at before its estimator has measured anything.  Pure.

Spark sizes every batch cut before the first one completes by ``initialRate``: a guess that no
later signal can shrink, since those batches are cut already.  A guess 10x over capacity queues
ten intervals of work; one 10x under wastes the first batches.  Here ``initial_rate`` is the
*ceiling* of a probe, not where it starts, as TCP's slow start probes a link:

* the first batch is small: ``initial_rate / 16``, but never under ``20 x min_rate`` (a batch at
  the estimator's floor says little, and "no batch at the minimum rate" is a goal), nor over the
  ceiling;
* each batch with records that finishes inside the interval doubles the rate, up to the ceiling,
  while the estimator has no answer or one under the rate in force (see :meth:`SlowStart.settle`);
* the probe ends at the first batch that overruns, at an estimate at least the rate in force, or
  at the first in-flight cut: from then on the estimator decides.

The cost: while the probe grows, batches are smaller than a perfect guess would make them; the
records given up stay upstream (receivers keep to the tracker's bound, so they wait in Kafka, not
in memory).  docs/guide/rate-control.md gives the figures.

:class:`Decision` is the record of every rate a controller published and why, for a UI to show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SlowStart", "Decision", "REASONS", "first_probe", "FIRST_DIVISOR", "FLOOR_MIN_RATES", "GROWTH"]

FIRST_DIVISOR = 16.0  # the first probe is the ceiling over this
FLOOR_MIN_RATES = 20.0  # ... and at least this many times the estimator's minimum rate
GROWTH = 2.0  # per batch finished inside the interval

REASONS = (
    "initial",  # the configured initial rate, published as is (slow start off)
    "resume",  # the rate the tracker remembered from before a restart
    "slow_start",  # the probe's first rate
    "slow_start_grow",  # a probe batch finished inside the interval: the rate doubles
    "estimate",  # the estimator's answer to a completed batch
    "in_flight_cut",  # the estimator's answer to in-flight signals (a cut before completion)
)


@dataclass(frozen=True)
class Decision:
    """One published rate: when (driver ms), what (records/s) and why (one of :data:`REASONS`)."""

    time_ms: float
    rate: float
    reason: str


def first_probe(ceiling: float | None, min_rate: float) -> float:
    """The probe's first rate for ``ceiling`` (``None``: no initial rate, no ceiling)."""
    floor = FLOOR_MIN_RATES * min_rate
    if ceiling is None or not math.isfinite(ceiling) or ceiling <= 0:
        return floor
    return min(ceiling, max(ceiling / FIRST_DIVISOR, floor))


class SlowStart:
    """The probe of one stream: its rate, and whether it still runs.

    :param batch_interval_ms: a batch "finished inside the interval" when its scheduling plus
        processing delay is at most this.
    :param ceiling: the configured initial rate; ``None``: no ceiling (growth ends at the estimate).
    :param min_rate: the estimator's floor (Spark's ``pid.minRate``).
    """

    def __init__(self, batch_interval_ms: float, ceiling: float | None, min_rate: float) -> None:
        self.batch_interval_ms = float(batch_interval_ms)
        self.ceiling = ceiling if ceiling is not None and math.isfinite(ceiling) and ceiling > 0 else None
        self.rate = first_probe(self.ceiling, min_rate)
        self.active = True

    def settle(
        self, estimate: float | None, records: float, processing_ms: float, scheduling_ms: float
    ) -> tuple[float, str] | None:
        """What to publish after a completed batch, given the estimator's (checked) answer to it:
        ``(rate, reason)``, or ``None`` for nothing.

        While the probe runs, a batch with records that finished inside the interval grows the
        probe when the estimator has no answer, or one under the rate that batch just ran at (an
        estimator's first answers may come from batches too small, or cut short by a receiver
        still starting, to say where capacity ends).  The probe ends at a batch that overran, or
        at an estimate at least the rate in force: the estimator decides from then on.
        """
        if self.active and records > 0:
            proven = self.rate
            grown = self._grow(processing_ms, scheduling_ms)
            if grown is not None and (estimate is None or estimate < proven):
                return grown, "slow_start_grow"
            self.active = False
        return None if estimate is None else (estimate, "estimate")

    def _grow(self, processing_ms: float, scheduling_ms: float) -> float | None:
        """The grown probe after a batch that finished inside the interval; ``None`` if it overran."""
        if processing_ms + max(0.0, scheduling_ms) > self.batch_interval_ms:
            return None
        grown = self.rate * GROWTH
        self.rate = grown if self.ceiling is None else min(grown, self.ceiling)
        return self.rate

    def finish(self) -> None:
        """The estimator answered: it decides from now on."""
        self.active = False
