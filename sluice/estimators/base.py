"""The one interface every rate estimator implements (Spark's ``RateEstimator`` trait), and the
optional richer one an estimator may opt into (:class:`InFlight` signals, which Spark never had).

It is a ``typing.Protocol`` rather than a base class so that a plugin can ship an estimator
without importing Sluice at all: anything with a matching ``compute`` is an estimator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

__all__ = ["RateEstimator", "SignalAwareEstimator", "EstimatorFactory", "InFlight", "RunningBatch", "QueuedBatch"]


@runtime_checkable
class RateEstimator(Protocol):
    """Turns what one completed batch achieved into the rate (records/s) for the next batches."""

    def compute(self, time_ms: int, elements: int, processing_delay_ms: int, scheduling_delay_ms: int) -> float | None:
        """Return the new rate in records per second, or ``None`` for "no new estimate".

        ``time_ms`` is when the batch finished processing (Spark passes ``processingEndTime``,
        not the batch time), ``elements`` the records it held, and the delays are in
        milliseconds.  ``None`` is not a failure: it means this batch says nothing new (e.g. it
        was empty), and the caller keeps the last rate.
        """
        ...


class RunningBatch(NamedTuple):
    """A batch being processed: its time, its records (this stream's) and how long it has run."""

    batch_time_ms: int
    records: int
    elapsed_ms: float


class QueuedBatch(NamedTuple):
    """A batch cut and waiting for a job thread: its time and its records (this stream's)."""

    batch_time_ms: int
    records: int


@dataclass(frozen=True)
class InFlight:
    """What the driver sees between two completed batches, for one stream.

    Spark's estimator learns only when a batch completes; by then an overloaded batch has already
    cost its whole overrun, and the batches cut meanwhile were sized for the old capacity.  These
    signals show it earlier: a running batch already past the time its records should take is
    overload before it completes, and the batches queued behind it say exactly how much work is
    waiting.  Fields that the source cannot tell are ``None``.

    :param time_ms: when the signals were sampled (the driver clock, as ``compute``'s ``time_ms``).
    :param running: the batches being processed, oldest first.
    :param queued: the batches cut and waiting to start, oldest first.
    :param backlog_records: records the tracker holds in blocks not yet allocated to a batch
        (they go into the next batch whatever rate is published now).
    :param receiver_lag: records the stream's receivers are behind their source (Kafka lag).
    :param rate: the rate in force (the last one published, by any estimate or the initial
        rate); ``None`` while the receivers run unbounded.
    """

    time_ms: float
    running: tuple[RunningBatch, ...] = ()
    queued: tuple[QueuedBatch, ...] = ()
    backlog_records: int | None = None
    receiver_lag: int | None = None
    rate: float | None = None


@runtime_checkable
class SignalAwareEstimator(RateEstimator, Protocol):
    """An estimator that opts into in-flight signals by having ``observe`` as well as ``compute``.

    ``compute`` stays the contract: it is called once per completed batch exactly as Spark calls
    it.  ``observe`` is called between completions, every ``backpressure.signal_interval_ms``
    (from a single sampling thread on the driver, never concurrently with ``compute``), and may
    return a rate to publish at once, or ``None`` to keep the current one.  The same guards apply
    to its answer as to ``compute``'s.  An estimator without ``observe`` is never sampled for.
    """

    def observe(self, signals: InFlight) -> float | None: ...


EstimatorFactory = Callable[[int, Mapping[str, Any]], RateEstimator]
"""What a plugin registers under a name: ``factory(batch_interval_ms, options) -> estimator``.

A factory validates ``options`` itself and raises ``ValueError`` naming any option it does not
know, so a typo in a config file stops the driver before it starts instead of being ignored.
"""
