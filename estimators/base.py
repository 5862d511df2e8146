"""The one interface every rate estimator implements (Spark's ``RateEstimator`` trait).

It is a ``typing.Protocol`` rather than a base class so that a plugin can ship an estimator
without importing Sluice at all: anything with a matching ``compute`` is an estimator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["RateEstimator", "EstimatorFactory"]


@runtime_checkable
class RateEstimator(Protocol):
    """Turns what one completed batch achieved into the rate (records/s) for the next batches."""

    def compute(self, time_ms: int, elements: int, processing_delay_ms: int,
                scheduling_delay_ms: int) -> float | None:
        """Return the new rate in records per second, or ``None`` for "no new estimate".

        ``time_ms`` is when the batch finished processing (Spark passes ``processingEndTime``,
        not the batch time), ``elements`` the records it held, and the delays are in
        milliseconds.  ``None`` is not a failure: it means this batch says nothing new (e.g. it
        was empty), and the caller keeps the last rate.
        """
        ...


EstimatorFactory = Callable[[int, Mapping[str, Any]], RateEstimator]
"""What a plugin registers under a name: ``factory(batch_interval_ms, options) -> estimator``.

A factory validates ``options`` itself and raises ``ValueError`` naming any option it does not
know, so a typo in a config file stops the driver before it starts instead of being ignored.
"""
