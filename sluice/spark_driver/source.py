"""Where batches come from: the one interface between :class:`StreamingDriver` and its inputs.

Spark's ``JobGenerator`` asks the ``DStreamGraph`` for each batch's RDDs and the
``ReceiverTracker`` (receiver mode) or ``DirectKafkaInputDStream`` (direct mode) decides what goes
in.  Sluice keeps that split: the driver owns *when* (timer, triggers, retries, listeners, the rate
loop) and a :class:`BatchSource` owns *what* (which blocks or offset ranges make up the batch, what
to report when it is done, where a new rate goes).  Two implementations:

* ``sluice.spark_driver.receiver_source.ReceiverSource``: tracker + block store (receiver mode);
* ``sluice.spark_driver.direct``: per-partition offset ranges computed on the driver (direct Kafka).

Call order, all from the driver's threads (a source must tolerate ``create_batch`` on the
job-generator thread while ``on_batch_completed`` runs on a job thread):

1. ``start(context)`` once, before anything else.
2. ``latest_published_rate(stream_id)`` for each stream: on restart the driver resumes from the
   last rate instead of starting unbounded; ``None`` means "never published".
3. ``recover()``: batch times that were created but never completed (ascending).  For each, in
   order, the driver calls ``rebuild_batch(t)`` and runs it before the first new tick, so a driver
   killed mid-batch re-runs exactly that batch with exactly the same input.
4. When backpressure is on and an initial rate is set, ``publish_rate(initial_rate, stream_id)``
   before the first batch, so the first batch is bounded.
5. On every trigger: ``create_batch(batch_time_ms, rate)``.  ``rate`` is the latest estimate (or the
   initial rate before the first; ``None`` without backpressure); direct mode bounds its offset
   ranges with it, receiver mode bounds each stream's allocation with that stream's
   ``context.current_rate`` (except under ``once``).
   Return ``None`` when the batch time allocates nothing (not later than the last allocated one),
   otherwise a :class:`~sluice.spark_driver.batch.Batch` (possibly with no records: Spark runs empty
   batches too).
6. ``on_batch_completed(batch, info)`` after the user's function succeeded, or after it failed for
   good and the failure policy is ``skip`` (``info.status == "skipped"``), so the source never offers
   the batch again.  Receiver mode reports to the tracker and deletes the blocks it hands back;
   direct mode commits offsets.
7. ``publish_rate(rate, stream_id)`` whenever the ``RateController`` has a new rate.
8. ``has_more_available()`` after each batch under the ``available-now`` trigger: ``False`` ends
   the run (receiver mode: no unallocated blocks and no receiver lag; direct mode: every partition
   read up to the latest offset seen at start).
9. ``stop()`` once, last; the source closes its connections.  ``stop`` must be safe to call after a
   failed ``start``, and from another thread while ``start`` waits for a peer: ``start`` then raises.

Optional, each a runtime-checkable protocol below: ``stop_waiting()`` (:class:`StopsWaiting`),
called when a stop begins; calls that wait for a lost peer should fail at once from then on, so an
outage cannot hold the stop (receiver mode has it).  ``last_batch_time()``
(:class:`KnowsLastBatchTime`), after ``recover``: the latest batch time the stream ever created
(``None`` for none); under the ``fixed`` trigger a restarted driver then creates the batch of the
boundary that passed while no driver ran at once, instead of waiting for the next (receiver mode has
it).  ``backlog()`` (:class:`ReportsBacklog`): the in-flight signals' unallocated records and lag.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sluice.errors import SluiceError

if TYPE_CHECKING:  # pragma: no cover - imports for type checkers only
    from pyspark.sql import SparkSession

    from sluice.spark_driver.batch import Batch, BatchInfo


@dataclass(frozen=True)
class SourceContext:
    """What the driver hands a source on ``start``.

    ``streams`` are the input stream ids the driver runs a ``RateController`` for (receiver mode:
    the tracker's stream ids; direct mode: ``(0,)``).  ``options`` carries the resolved
    configuration sections (``kafka``, ``driver``, ...) as plain dicts, so a source needs no
    import of the config module.  ``trigger`` is the trigger's name; ``current_rate(stream_id)``
    is the rate the driver's rate loop has in force for a stream (``None``: no bound).
    ``capacity_rate(stream_id)``, where a source keeps admission apart from batches (receivers
    admit, the tracker queues), is the rate a batch of what is queued may take: the same under
    the throughput target, the rate that fills the interval under the latency target (so what
    receivers admitted before a cut drains with the capacity the budget holds back); ``None``
    means ``current_rate``.
    """

    spark: SparkSession
    batch_interval_ms: int
    streams: tuple[int, ...] = (0,)
    options: dict[str, Any] = field(default_factory=dict)
    trigger: str = "fixed"
    current_rate: Callable[[int], float | None] = field(default=lambda stream_id: None)
    capacity_rate: Callable[[int], float | None] | None = None


@runtime_checkable
class BatchSource(Protocol):
    """The driver's input: creates, rebuilds and acknowledges batches; receives rates."""

    def start(self, context: SourceContext) -> None:
        """Connect (tracker, brokers); called once before any other method."""

    def latest_published_rate(self, stream_id: int = 0) -> float | None:
        """The last rate published for ``stream_id`` (survives a driver restart), or None."""

    def recover(self) -> list[int]:
        """Batch times created but not completed before a restart, ascending."""

    def rebuild_batch(self, batch_time_ms: int) -> Batch:
        """The batch of a recovered time, with exactly the input it had the first time."""

    def create_batch(self, batch_time_ms: int, rate: float | None) -> Batch | None:
        """A new batch for ``batch_time_ms`` (``None``: nothing allocated for this time)."""

    def on_batch_completed(self, batch: Batch, info: BatchInfo) -> None:
        """The batch is done (succeeded, or skipped after its retries): acknowledge it."""

    def publish_rate(self, rate: float, stream_id: int = 0) -> None:
        """A new rate estimate for ``stream_id`` (direct mode may keep it for the next batch)."""

    def has_more_available(self) -> bool:
        """Whether input is still waiting (the ``available-now`` trigger stops when not)."""

    def stop(self) -> None:
        """Release connections; safe after a failed ``start`` and when called twice."""


# The optional parts of a source, each one method: the driver asks ``isinstance`` (so these are
# runtime-checkable) and a source without one simply goes without what it gives.


@runtime_checkable
class StopsWaiting(Protocol):
    """A source whose calls may wait for a lost peer: ``stop_waiting`` makes them fail at once."""

    def stop_waiting(self) -> None: ...


@runtime_checkable
class KnowsLastBatchTime(Protocol):
    """A source that knows the latest batch time its stream ever created (``None``: none)."""

    def last_batch_time(self) -> int | None: ...


@runtime_checkable
class ReportsBacklog(Protocol):
    """A source that can tell, per stream, the records waiting unallocated and its receivers' lag
    (the in-flight signals' ``backlog_records`` and ``receiver_lag``; ``None`` where unknown)."""

    def backlog(self) -> dict[int, tuple[int | None, int | None]]: ...


class SourceError(SluiceError, RuntimeError):
    """A source could not do what the driver asked; the message names the batch and the cause."""


class SourceRefused(SourceError):
    """The source's system refused this application's principal an operation it needs (Kafka's
    authorizer); the message names the resource, the operation and the principal.

    Not retriable: every attempt is refused alike until an operator grants it, so ``sluice-driver``
    stops with exit status 2, as a receiver does.
    """

    retriable = False
