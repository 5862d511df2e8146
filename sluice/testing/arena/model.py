"""The arena's model of the world an estimator controls: a cost per batch and an offered load.

Why a model at all: the estimator's job is to find the records per batch that
fill the batch interval, on a system whose cost it cannot see.  Judging estimators needs a
system whose cost we *can* see, reproducible to the last record, so that "estimator A settles
in 4 batches, B in 30" is a property of the estimators and not of a noisy afternoon.  The model
is deliberately the textbook one, with each effect known to trouble the PID switchable per
scenario:

* ``processing = overhead + cost_per_record * n``: the fixed part (job scheduling, task launch,
  Python worker hand-off) is why a tiny batch looks slow per record and why Spark's
  ``elements / processing_delay`` under-estimates capacity after the minimum rate.
* a GC/spill penalty past ``cliff_records``: the per-record cost is multiplied by
  ``cliff_factor`` for records beyond the threshold, plus a one-off ``cliff_jump_ms`` (a full
  GC): the PID divides the whole time by the whole count and swings.
* ``speed(t)``: the share of the cluster the job gets (a noisy neighbour, a lost executor, a
  daily cycle).  Everything, overhead included, runs ``1/speed`` times slower.  The PID's fixed
  point (processing time equal to the interval) assumes this never changes.
* multiplicative log-normal noise on each batch's processing time (timing jitter).

Nothing here knows which estimator runs: every estimator is fed by the same simulator
(``sim.py``) with the same random draws for the same seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Profile", "Constant", "Steps", "Periodic", "CostModel", "Source"]


class Profile(Protocol):
    """A positive quantity as a function of simulated time in seconds."""

    def __call__(self, t_s: float) -> float: ...


@dataclass(frozen=True)
class Constant:
    """The same value at every time."""

    value: float = 1.0

    def __call__(self, t_s: float) -> float:
        return self.value


@dataclass(frozen=True)
class Steps:
    """``initial`` until the first step, then each ``(time_s, value)`` from its time on."""

    initial: float
    steps: tuple[tuple[float, float], ...] = ()

    def __call__(self, t_s: float) -> float:
        value = self.initial
        for time_s, step_value in self.steps:
            if t_s >= time_s:
                value = step_value
        return value

    @property
    def change_times(self) -> tuple[float, ...]:
        return tuple(time_s for time_s, _ in self.steps)


@dataclass(frozen=True)
class Periodic:
    """``mean * (1 + amplitude * sin(2 pi t / period))``: a daily cycle compressed."""

    mean: float
    amplitude: float
    period_s: float
    phase: float = 0.0

    def __call__(self, t_s: float) -> float:
        return self.mean * (1.0 + self.amplitude * math.sin(2 * math.pi * t_s / self.period_s + self.phase))


@dataclass(frozen=True)
class CostModel:
    """Processing time of one batch (ms) as a function of its records and the time it starts."""

    overhead_ms: float = 100.0
    cost_per_record_ms: float = 0.09
    cliff_records: float | None = None
    cliff_factor: float = 1.0
    cliff_jump_ms: float = 0.0
    noise_sigma: float = 0.0
    speed: Profile = field(default_factory=Constant)
    first_batch_extra_ms: float = 0.0

    def work_ms(self, records: float) -> float:
        """Noise-free processing time at speed 1 (convex in ``records``: linear, then steeper)."""
        work = self.overhead_ms + self.cost_per_record_ms * records
        if self.cliff_records is not None and records > self.cliff_records:
            excess = records - self.cliff_records
            work += self.cliff_jump_ms + self.cost_per_record_ms * (self.cliff_factor - 1.0) * excess
        return work

    def processing_ms(self, records: float, start_s: float, noise: float = 1.0) -> float:
        """The time a batch of ``records`` takes when it starts at ``start_s``; ``noise`` is the
        multiplicative draw (1.0 = none) the simulator makes from its seeded generator."""
        return self.work_ms(records) / self.speed(start_s) * noise

    def capacity_records(self, interval_ms: float, t_s: float) -> float:
        """Largest batch that finishes within one interval at time ``t_s`` (noise-free).

        This is the sustainable throughput every metric compares against; bisection because the
        cliff makes the cost piecewise.  0 when even an empty batch overruns the interval.
        """
        budget = interval_ms * self.speed(t_s)
        if self.work_ms(0) >= budget:
            return 0.0
        low, high = 0.0, 1.0
        while self.work_ms(high) < budget:
            high *= 2
        for _ in range(60):
            mid = (low + high) / 2
            if self.work_ms(mid) <= budget:
                low = mid
            else:
                high = mid
        return low


@dataclass(frozen=True)
class Source:
    """What upstream offers: records/s arriving over time, plus a lag present at start.

    Records the receiver does not admit stay upstream (Kafka lag, or a socket's send buffer and
    a generator that blocks), so throughput can catch up later: nothing is dropped.
    """

    offered: Profile = field(default_factory=lambda: Constant(10_000.0))
    initial_backlog: float = 0.0

    def arrivals(self, start_s: float, end_s: float) -> float:
        """Records arriving in ``[start_s, end_s)`` (midpoint rule; profiles are smooth or steps)."""
        return self.offered((start_s + end_s) / 2) * (end_s - start_s)


def change_times(profile: Profile) -> Sequence[float]:
    """Times at which a step profile changes (empty for smooth or constant profiles)."""
    return getattr(profile, "change_times", ())
