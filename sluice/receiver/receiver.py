"""``Receiver``: the class users extend to bring data in (Spark's ``Receiver[T]``).

As in Spark, ``on_start`` sets things up and returns (here: a coroutine that starts background
tasks with :meth:`Receiver.spawn`), ``on_stop`` tears them down, and the receiver hands data over
with ``store`` / ``store_many``, which pass through the rate limiter into the block generator.
A spawned task that raises makes the supervisor report the error and restart the receiver after
``restart_delay_ms`` (what a Spark receiver does by calling ``restart`` from its thread).

Two hooks beyond Spark serve sources with offsets: :meth:`on_block_acknowledged` runs after the
tracker durably accepted a block (a Kafka receiver commits the offsets it covers there) and
:meth:`close` runs after the last block is acknowledged (so a consumer can still commit then).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol

from sluice.block_info import OffsetRange
from sluice.clock import Clock
from sluice.errors import InvalidState, SluiceError
from sluice.receiver.block_generator import BlockGenerator
from sluice.receiver.metrics import ReceiverMetrics
from sluice.receiver.rate_limiter import RateLimiter
from sluice.storage.block_format import EncodedPiece

log = logging.getLogger(__name__)

# Offset metadata passed to store_many: {(topic, partition): (from_offset, until_offset)}
OffsetMeta = dict[tuple[str, int], tuple[int, int]]


class Pusher(Protocol):
    """Where a receiver's records go: the rate limiter and the block generator behind it
    (:class:`~sluice.receiver.block_pusher.BlockPusher`)."""

    @property
    def generator(self) -> BlockGenerator: ...
    async def push_single(self, item: Any) -> None: ...
    async def push_many(self, items: Sequence[Any], metadata: OffsetMeta | None) -> None: ...
    async def push_encoded(self, piece: EncodedPiece, metadata: OffsetMeta, fetched_ms: int | None = None) -> None: ...
    def piece_size(self) -> int: ...
    async def flush(self) -> None: ...


class Supervisor(Protocol):
    """What a receiver asks of the supervisor that adopts it
    (:class:`~sluice.receiver.supervisor.ReceiverSupervisor`): its ids, its pusher, clock, limiter
    and metrics, and the calls that report, restart and stop.  Stated here so that this module,
    which the supervisor and the pusher import, imports neither of them."""

    @property
    def stream_id(self) -> int: ...
    @property
    def receiver_id(self) -> str: ...
    @property
    def pusher(self) -> Pusher: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def limiter(self) -> RateLimiter: ...
    @property
    def metrics(self) -> ReceiverMetrics: ...
    def is_receiver_started(self) -> bool: ...
    def is_receiver_stopped(self) -> bool: ...
    def report_error(self, message: str, error: BaseException | None = None) -> None: ...
    def request_restart(self, message: str, error: BaseException | None, delay_ms: float | None) -> None: ...
    def request_stop(self, message: str, error: BaseException | None = None) -> None: ...


class ReceiverNotStarted(SluiceError, RuntimeError):
    """The receiver was used before a supervisor adopted it."""

    pass


class Receiver:
    """Base class of every source; override ``on_start`` and ``on_stop``."""

    def __init__(self) -> None:
        self._supervisor: Supervisor | None = None
        self._tasks: set[asyncio.Task] = set()

    # -- to override ----------------------------------------------------------------------------
    async def on_start(self) -> None:
        """Start receiving: open connections, ``spawn`` the loops. Must return promptly."""
        raise NotImplementedError

    async def on_stop(self) -> None:
        """Stop receiving (no more ``store`` calls); spawned tasks are cancelled after it."""

    async def close(self) -> None:
        """Release the source once every block this receiver stored is acknowledged."""

    async def on_block_acknowledged(self, block_id: str, offset_ranges: tuple[OffsetRange, ...]) -> None:
        """The tracker durably accepted ``block_id``; commit ``offset_ranges`` at the source if any."""

    def lag(self) -> int | None:
        """Records the source holds that this receiver has not read yet (None: unknown)."""
        return None

    def open_transaction_records(self) -> int | None:
        """Records the source holds past what this receiver may read yet, held back by
        transactions still open (Kafka under ``read_committed``: high watermark minus last stable
        offset); None where the source has no such thing or reads them."""
        return None

    def head_timestamp_ms(self) -> int | None:
        """With a positive :meth:`lag`: the source timestamp (ms since the epoch) of the last record
        stored, which the next unread one is no older than (None: unknown).  Sent with the
        heartbeat, it bounds the age of a backlog that waits in the source, where no block shows it."""
        return None

    # -- wiring ---------------------------------------------------------------------------------
    def attach_supervisor(self, supervisor: Supervisor) -> None:
        if self._supervisor is not None and self._supervisor is not supervisor:
            raise InvalidState("receiver already has a supervisor")
        self._supervisor = supervisor

    @property
    def supervisor(self) -> Supervisor:
        if self._supervisor is None:
            raise ReceiverNotStarted("receiver is not attached to a supervisor")
        return self._supervisor

    @property
    def stream_id(self) -> int:
        return self.supervisor.stream_id if self._supervisor else -1

    @property
    def receiver_id(self) -> str:
        return self.supervisor.receiver_id

    def is_started(self) -> bool:
        return self._supervisor is not None and self._supervisor.is_receiver_started()

    def is_stopped(self) -> bool:
        return self._supervisor is None or self._supervisor.is_receiver_stopped()

    # -- storing ----------------------------------------------------------------------------------
    async def store(self, item: Any) -> None:
        """Store one record (rate limited; waits while the block pipeline is full)."""
        await self.supervisor.pusher.push_single(item)

    async def store_many(self, items: Sequence[Any], metadata: OffsetMeta | None = None) -> None:
        """Store records, rate limited, in order.

        With ``metadata`` (``{(topic, partition): (from_offset, until_offset)}``) they go into one
        block together; without, a large call is stored in pieces of one block interval's worth
        at the current rate (:meth:`piece_size`), so that a low rate still feeds every block.  A
        source with offsets keeps that smoothness by cutting its reads to :meth:`piece_size`.
        """
        await self.supervisor.pusher.push_many(items, metadata)

    async def store_encoded(self, piece: EncodedPiece, metadata: OffsetMeta, fetched_ms: int | None = None) -> None:
        """Store Kafka records already in a block's form, rate limited: one
        :class:`~sluice.storage.block_format.KafkaPiece` (see
        :func:`~sluice.storage.block_format.encode_kafka_piece`) or one
        :class:`~sluice.kafka.record_batches.KafkaBatches` (record batches as fetched).  They go
        into one block together, as ``store_many`` with metadata.  A receiver stores one kind.
        ``fetched_ms``: when they arrived (:func:`sluice.stages.now_ms`), if earlier than now."""
        await self.supervisor.pusher.push_encoded(piece, metadata, fetched_ms)

    def piece_size(self) -> int:
        """The most records one ``store_many`` should take now (one block interval's worth)."""
        return self.supervisor.pusher.piece_size()

    async def flush(self) -> None:
        """Cut a block of what is held now and wait until it and all earlier ones are acknowledged."""
        await self.supervisor.pusher.flush()

    # -- control --------------------------------------------------------------------------------
    def report_error(self, message: str, error: BaseException | None = None) -> None:
        self.supervisor.report_error(message, error)

    def restart(self, message: str, error: BaseException | None = None, delay_ms: int | None = None) -> None:
        """Stop and start this receiver again after ``delay_ms`` (default ``restart_delay_ms``)."""
        self.supervisor.request_restart(message, error, delay_ms)

    def stop(self, message: str, error: BaseException | None = None) -> None:
        self.supervisor.request_stop(message, error)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task:
        """Run ``coro`` as part of this receiver: cancelled at stop, an error restarts the receiver."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and self._supervisor is not None:
            self._supervisor.request_restart(
                f"Error in receiver {self._supervisor.receiver_id} ({task.get_name()})", exc, None
            )

    async def cancel_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001 - already reported through _task_done
                pass
