"""``ConstantEstimator``: a fixed rate, i.e. backpressure off but with a known ceiling.

It exists as a baseline for comparisons (how much does adapting buy?) and for operators who
know their capacity and want no feedback loop at all.  It answers every batch, including the
first, because there is nothing to learn.
"""

from __future__ import annotations

import math
from numbers import Real

from sluice.errors import InvalidArgument

__all__ = ["ConstantEstimator"]


class ConstantEstimator:
    """Always returns ``rate`` (records/s)."""

    def __init__(self, rate: float) -> None:
        if isinstance(rate, bool) or not isinstance(rate, Real) or not (math.isfinite(rate) and rate > 0):
            raise InvalidArgument(f"ConstantEstimator: rate must be a finite number > 0 (records/s), got {rate!r}")
        self.rate: float = float(rate)

    def compute(self, time_ms: int, elements: int, processing_delay_ms: int, scheduling_delay_ms: int) -> float | None:
        """The configured rate, whatever the batch did."""
        return self.rate

    def __repr__(self) -> str:
        return f"ConstantEstimator(rate={self.rate:g})"
