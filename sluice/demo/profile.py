"""Load profiles: offered records per second as a function of time.

A profile is a list of segments ``(rate, seconds)``. Named profiles are fractions of the run and
multiples of a base rate (the capacity the demo's word count is tuned to), so ``--seconds 20`` and
``--seconds 300`` show the same story; an explicit ``RATE@SECONDS,...`` list is taken as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.errors import SluiceError

# name -> [(multiple of the base rate, fraction of the run)]
NAMED: dict[str, list[tuple[float, float]]] = {
    # below capacity, well above it, back below: the step the PID estimator must follow
    "step": [(0.5, 0.3), (3.0, 0.3), (0.5, 0.4)],
    "constant": [(1.0, 1.0)],
    # a spike shorter than the estimator's reaction: the backlog stays in Kafka, not in Spark
    "spike": [(0.5, 0.4), (5.0, 0.1), (0.5, 0.5)],
    # the load climbs past capacity in steps and comes down again
    "ramp": [(0.25, 0.15), (0.5, 0.15), (1.0, 0.15), (2.0, 0.15), (3.0, 0.15), (0.5, 0.25)],
}


class ProfileError(SluiceError, ValueError):
    """A profile that cannot be parsed; the message says what is allowed."""


@dataclass(frozen=True)
class Profile:
    """Piecewise-constant offered load."""

    segments: tuple[tuple[float, float], ...]  # (records/s, seconds)

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.segments)

    def rate_at(self, t: float) -> float:
        """Offered records/s at ``t`` seconds after the start (0 after the end)."""
        start = 0.0
        for rate, seconds in self.segments:
            if start <= t < start + seconds:
                return rate
            start += seconds
        return 0.0

    def records_until(self, t: float) -> int:
        """Records a producer following the profile has offered by ``t`` (the integral, truncated)."""
        total, start = 0.0, 0.0
        for rate, seconds in self.segments:
            if t <= start:
                break
            total += rate * (min(t, start + seconds) - start)
            start += seconds
        return int(total)

    def offered_between(self, start: float, end: float) -> float:
        """Records/s offered over ``(start, end]``: what a batch covering that interval was offered."""
        return (self.records_until(end) - self.records_until(start)) / (end - start)

    def steps(self) -> list[tuple[float, float, float]]:
        """``(t, from, to)`` for each change of the offered rate, the end of the load (to 0) included."""
        changes, start, previous = [], 0.0, None
        for rate, seconds in self.segments:
            if previous is not None and rate != previous:
                changes.append((start, previous, rate))
            start, previous = start + seconds, rate
        if previous:
            changes.append((start, previous, 0.0))
        return changes

    def step_window(self) -> tuple[float, float] | None:
        """(start, end) of the first segment at the peak rate after a lower one (the step the
        summary measures from), or None when the load never steps up."""
        peak = max(rate for rate, _ in self.segments)
        start = 0.0
        for i, (rate, seconds) in enumerate(self.segments):
            if rate == peak and i > 0 and self.segments[i - 1][0] < peak:
                return start, start + seconds
            start += seconds
        return None


def parse(text: str, seconds: float, base_rate: float) -> Profile:
    """``step``/``constant``/``spike``/``ramp``, or ``RATE@SECONDS[,RATE@SECONDS...]``."""
    if seconds <= 0 or base_rate <= 0:
        raise ProfileError(f"seconds and base rate must be above 0, got {seconds} and {base_rate}")
    if text in NAMED:
        return Profile(tuple((base_rate * m, seconds * f) for m, f in NAMED[text]))
    segments = []
    for part in text.split(","):
        rate, at, length = part.strip().partition("@")
        try:
            segment = (float(rate), float(length))
        except ValueError:
            segment = None
        if not at or segment is None or segment[0] < 0 or segment[1] <= 0:
            raise ProfileError(
                f"profile {text!r} is not allowed: expected one of {', '.join(NAMED)} "
                "or RATE@SECONDS[,RATE@SECONDS...] (e.g. 500@10,3000@10,500@20)"
            )
        segments.append(segment)
    return Profile(tuple(segments))
