"""Spark's ``BlockGenerator`` on asyncio: records → buffer → one block per block interval → pusher.

Received records are appended to a current buffer; a :class:`~sluice.receiver.timer.RecurringTimer`
aligned to block-interval boundaries swaps a non-empty buffer out as a block named for the start of
its interval and puts it on a bounded queue; one pushing task hands each block to the listener's
``on_push_block`` (which stores it and reports it to the tracker).

Same states, stop order and listener callbacks as Spark.  Three departures, all on purpose:

* memory is bounded end to end: when the queue is full the timer waits (as in Spark), and
  ``add_*`` wait once the current buffer holds ``max_block_records`` records or ``max_block_bytes``
  bytes (encoded pieces: bytes only; Spark's buffer grows without limit), so at most
  ``block_queue_size + 2`` blocks exist (queue, one waiting to enter it, one being pushed) plus one
  buffer;
* a push error is reported through ``on_error`` and the *same* block is retried with exponential
  backoff (Spark's pushing thread dies on the first error and later blocks are never pushed);
* a block is cut ``block_lead_ms`` before its interval ends.  Block and batch times are both
  multiples of their intervals since the epoch (each a ``RecurringTimer``), so in Spark the block of
  the interval that ends on a batch boundary is cut at the very instant the driver allocates that
  batch, and its report arrives just after the allocation (``ReceivedBlockTracker``'s
  ``allocateBlocksToBatch`` takes the blocks reported so far): its records wait a whole batch more.
  Cut a little early, the block is stored and reported before the boundary, and the records of the
  lead's last milliseconds go into the next block instead.  The block keeps its interval's name.

There is no lock: on one event loop the code between two ``await`` points is atomic, which gives
Spark's guarantee that data and ``on_add_data`` / ``on_generate_block`` are serialized.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sluice.block_info import block_id_prefix
from sluice.clock import Clock, SystemClock
from sluice.errors import InvalidArgument, SluiceError
from sluice.receiver.rate_limiter import RateLimiter
from sluice.receiver.timer import RecurringTimer
from sluice.settings import ReceiverSettings
from sluice.storage.block_format import ENCODED_PIECES, EncodedPiece

log = logging.getLogger(__name__)

_DEFAULTS = ReceiverSettings()  # the schema's receiver.* defaults


class BlockGeneratorError(SluiceError, RuntimeError):
    """Misuse of a block generator (adding when not active, starting twice): Spark's SparkException."""


class GeneratorState(enum.IntEnum):
    INITIALIZED = 0
    ACTIVE = 1
    STOPPED_ADDING_DATA = 2
    STOPPED_GENERATING_BLOCKS = 3
    STOPPED_ALL = 4


class BlockGeneratorListener(Protocol):
    """Spark's ``BlockGeneratorListener``; ``on_push_block`` is a coroutine (it does I/O)."""

    def on_add_data(self, data: Any, metadata: Any) -> None: ...

    def on_generate_block(self, block_id: str) -> None: ...

    async def on_push_block(self, block_id: str, records: list, num_records: int) -> None: ...

    def on_error(self, message: str, error: BaseException | None) -> None: ...


@dataclass
class GeneratedBlock:
    block_id: str
    records: list  # records, or encoded pieces of one type
    num_records: int
    time_ms: float  # start of the block's interval
    seq: int = 0


_STOP = object()


_SIZED = (str, bytes)  # records whose bytes the buffer counts (their len); others count 0


def _encoded_type(item: Any) -> type | None:
    """The piece type of an encoded piece (a block holds one), None for a record."""
    kind = type(item)
    return kind if kind in ENCODED_PIECES else None


def _payload_bytes(items: list) -> int:
    """The bytes of ``str`` / ``bytes`` records (one pass in C); 0 for records it cannot size cheaply."""
    if items and type(items[0]) in _SIZED:
        try:
            return sum(map(len, items))
        except TypeError:
            return 0
    return 0


class _Signal:
    """Wake every coroutine waiting on it (a condition variable without a lock)."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future] = []

    async def wait(self) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    def notify_all(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


class BlockGenerator:
    """One receiver's blocks: buffers records, cuts a block every interval, pushes blocks in order.

    :param listener: gets ``on_add_data``, ``on_generate_block``, ``on_push_block`` (store and report
        the block) and ``on_error``; the supervisor.
    :param stream_id: the stream the blocks belong to.
    :param receiver_id: the receiver, part of every block id.
    :param block_interval_ms: cut a block this often (``spark.streaming.blockInterval``).
    :param block_lead_ms: cut each block this long before its interval ends (see above), at most half
        the interval; 0 cuts on the interval's end, as Spark.
    :param block_queue_size: blocks waiting to be pushed before the timer waits
        (``spark.streaming.blockQueueSize``).
    :param max_block_records: ``add_*`` waits once the current buffer holds this many records;
        not for encoded pieces while there is a byte limit (their bytes are exact, and a count limit
        would cap a receiver at this many records per block interval however small they are).
    :param max_block_bytes: ``add_*`` waits once the current buffer holds this many bytes (of encoded
        Kafka pieces, or of ``str`` / ``bytes`` records; other records are bounded by count only);
        none: no byte limit.
    :param rate_limiter: admits records before they are buffered; none: no limit.
    :param clock: the timer's clock (a ``ManualClock`` in tests).
    :param push_retry_initial_ms: first wait before pushing a failed block again, doubled per failure
        up to ``push_retry_max_ms``.
    :param push_retry_max_ms: the longest wait between two pushes of the same block.
    """

    def __init__(
        self,
        listener: BlockGeneratorListener,
        stream_id: int,
        receiver_id: str,
        *,
        block_interval_ms: float = _DEFAULTS.block_interval_ms,
        block_lead_ms: float = 0.0,
        block_queue_size: int = _DEFAULTS.block_queue_size,
        max_block_records: int = _DEFAULTS.max_block_records,
        max_block_bytes: int | None = _DEFAULTS.max_block_bytes,
        rate_limiter: RateLimiter | None = None,
        clock: Clock | None = None,
        push_retry_initial_ms: float = 100.0,
        push_retry_max_ms: float = 5_000.0,
    ) -> None:
        if not block_interval_ms > 0:
            raise InvalidArgument(f"block_interval_ms must be above 0, got {block_interval_ms}")
        if not block_lead_ms >= 0:
            raise InvalidArgument(f"block_lead_ms must be at least 0, got {block_lead_ms}")
        if block_queue_size < 1 or max_block_records < 1 or (max_block_bytes is not None and max_block_bytes < 1):
            raise InvalidArgument(
                "block_queue_size, max_block_records and max_block_bytes must be at least 1, got "
                f"{block_queue_size}, {max_block_records} and {max_block_bytes}"
            )
        self.listener = listener
        self.stream_id = stream_id
        self.receiver_id = receiver_id
        self.block_interval_ms = block_interval_ms
        self.block_queue_size = block_queue_size
        self.max_block_records = max_block_records
        self.max_block_bytes = max_block_bytes
        self.clock: Clock = clock or (rate_limiter.clock if rate_limiter else SystemClock())
        self.rate_limiter = rate_limiter
        self.push_retry_initial_ms = push_retry_initial_ms
        self.push_retry_max_ms = push_retry_max_ms
        self.state = GeneratorState.INITIALIZED
        self._buffer: list = []  # records, or encoded pieces of one type (never a mix)
        self._buffered_records = 0
        self._buffered_bytes = 0
        self._queue: asyncio.Queue | None = None
        self._timer = RecurringTimer(
            self.clock,
            block_interval_ms,
            self._update_current_buffer,
            f"BlockGenerator-{receiver_id}",
            lead_ms=min(block_lead_ms, block_interval_ms / 2),
        )
        self._pusher: asyncio.Task | None = None
        self._space = _Signal()
        self._pushed = _Signal()
        self._seq = 0
        self._unpushed: set[int] = set()
        self._flushes = 0
        self._in_flight = 0  # blocks generated but not yet pushed (queue + waiting + pushing)
        self.blocks_pushed = 0
        self.push_errors = 0

    # -- state -------------------------------------------------------------------------------
    def is_active(self) -> bool:
        return self.state == GeneratorState.ACTIVE

    def is_stopped(self) -> bool:
        return self.state == GeneratorState.STOPPED_ALL

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    @property
    def blocks_held(self) -> int:
        """Blocks generated and not yet pushed: the memory the bound promises to cap."""
        return self._in_flight

    @property
    def buffered_records(self) -> int:
        return self._buffered_records

    @property
    def buffered_bytes(self) -> int:
        return self._buffered_bytes

    def block_id_for(self, interval_start_ms: float, suffix: str = "") -> str:
        """Spark's ``input-<stream>-<unique>``; unique per receiver by the interval's start time."""
        return f"{block_id_prefix(self.stream_id, self.receiver_id)}{int(interval_start_ms)}{suffix}"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self.state != GeneratorState.INITIALIZED:
            raise BlockGeneratorError(f"cannot start BlockGenerator of {self.receiver_id} in state {self.state.name}")
        self._queue = asyncio.Queue(self.block_queue_size)
        self.state = GeneratorState.ACTIVE
        self._timer.start()
        self._pusher = asyncio.get_running_loop().create_task(
            self._keep_pushing(), name=f"BlockGenerator-push-{self.receiver_id}"
        )

    async def stop(self) -> None:
        """Stop adding, make the last block, push every queued block, then stop (Spark's order)."""
        if self.state != GeneratorState.ACTIVE:
            log.warning("BlockGenerator of %s: stop() in state %s ignored", self.receiver_id, self.state.name)
            return
        self.state = GeneratorState.STOPPED_ADDING_DATA
        self._space.notify_all()  # callers waiting for room fail now: no data after stop
        await self._timer.stop()  # one more tick turns the partial buffer into a block
        self.state = GeneratorState.STOPPED_GENERATING_BLOCKS
        assert self._queue is not None and self._pusher is not None
        await self._queue.put(_STOP)
        await asyncio.shield(self._pusher)
        self.state = GeneratorState.STOPPED_ALL

    def abort(self) -> None:
        """Tear down without pushing what is held (the process is going away regardless)."""
        self.state = GeneratorState.STOPPED_ALL
        self._timer.cancel()
        if self._pusher is not None:
            self._pusher.cancel()
        self._space.notify_all()
        self._pushed.notify_all()

    # -- adding data ------------------------------------------------------------------------------
    def _check_active(self) -> None:
        if self.state != GeneratorState.ACTIVE:
            raise BlockGeneratorError(
                f"cannot add data to BlockGenerator of {self.receiver_id} "
                f"as it has not been started or has been stopped ({self.state.name})"
            )

    def _full(self) -> bool:
        if self.max_block_bytes is None:
            return self._buffered_records >= self.max_block_records
        if self._buffer and _encoded_type(self._buffer[0]):  # their bytes are all they hold
            return self._buffered_bytes >= self.max_block_bytes
        return self._buffered_records >= self.max_block_records or self._buffered_bytes >= self.max_block_bytes

    async def _admit(self, count: int, encoded: type | None) -> float:
        """Rate-limit ``count`` records, then wait for room in the buffer; seconds spent on the limiter."""
        self._check_active()
        waited = await self.rate_limiter.acquire(count) if self.rate_limiter is not None else 0.0
        while self._full():
            self._check_active()
            await self._space.wait()
        self._check_active()
        if self._buffer and _encoded_type(self._buffer[0]) is not encoded:
            raise BlockGeneratorError(
                f"BlockGenerator of {self.receiver_id}: a block holds records or encoded "
                "pieces of one type, not a mix (a receiver stores one kind)"
            )
        return waited

    def _append_one(self, item: Any) -> None:
        self._buffer.append(item)
        self._buffered_records += 1
        if type(item) in _SIZED:
            self._buffered_bytes += len(item)

    async def add_data(self, item: Any) -> float:
        waited = await self._admit(1, None)
        self._append_one(item)
        return waited

    async def add_data_with_callback(self, item: Any, metadata: Any) -> float:
        waited = await self._admit(1, None)
        self._append_one(item)
        self.listener.on_add_data(item, metadata)
        return waited

    async def add_multiple_data_with_callback(self, items: Sequence[Any], metadata: Any) -> float:
        """All ``items`` go into the same block, and ``on_add_data`` sees them once (Spark's rule)."""
        if not isinstance(items, list):
            items = list(items)
        waited = await self._admit(len(items), None)
        self._buffer.extend(items)
        self._buffered_records += len(items)
        self._buffered_bytes += _payload_bytes(items)
        self.listener.on_add_data(items, metadata)
        return waited

    async def add_encoded_with_callback(self, piece: EncodedPiece, metadata: Any) -> float:
        """Records already in a block's form (:class:`KafkaPiece`, :class:`KafkaBatches`): one
        block holds them all, as with ``add_multiple_data_with_callback``, and the buffer counts
        their bytes."""
        waited = await self._admit(piece.num_records, type(piece))
        self._buffer.append(piece)
        self._buffered_records += piece.num_records
        self._buffered_bytes += piece.nbytes
        self.listener.on_add_data(piece, metadata)
        return waited

    # -- generating blocks -----------------------------------------------------------------------
    def _cut(self, block_id: str, time_ms: float) -> GeneratedBlock | None:
        if not self._buffer:
            return None
        records, count, self._buffer = self._buffer, self._buffered_records, []
        self._buffered_records = self._buffered_bytes = 0
        self.listener.on_generate_block(block_id)
        self._seq += 1
        self._unpushed.add(self._seq)
        self._in_flight += 1
        self._space.notify_all()
        return GeneratedBlock(block_id, records, count, time_ms, self._seq)

    async def _update_current_buffer(self, time_ms: float) -> None:
        """Timer tick for ``time_ms`` (run ``block_lead_ms`` before it): the buffer becomes the block
        of ``[time - interval, time)``."""
        try:
            start = time_ms - self.block_interval_ms
            block = self._cut(self.block_id_for(start), start)
            if block is not None:
                assert self._queue is not None
                await self._queue.put(block)  # waits while the queue is full: the timer stalls
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported, the timer goes on
            self.listener.on_error("Error in block updating thread", exc)

    async def flush(self) -> None:
        """Cut the current buffer now and wait until it and every earlier block is pushed.

        A Kafka receiver calls this when partitions are revoked, so the records it holds for them
        are acknowledged before it commits and lets the partitions go.
        """
        if self.state in (GeneratorState.INITIALIZED, GeneratorState.STOPPED_ALL):
            return
        if self.state == GeneratorState.ACTIVE:
            now = self.clock.now_ms() + self._timer.lead_ms  # the interval the buffer's block is named for
            start = math.floor(now / self.block_interval_ms) * self.block_interval_ms
            self._flushes += 1
            block = self._cut(self.block_id_for(start, f"-f{self._flushes}"), start)
            if block is not None:
                assert self._queue is not None
                await self._queue.put(block)
        target = self._seq
        while self._unpushed and min(self._unpushed) <= target:
            if self._pusher is None or self._pusher.done():
                return
            await self._pushed.wait()

    # -- pushing ---------------------------------------------------------------------------------
    async def _keep_pushing(self) -> None:
        assert self._queue is not None
        while True:
            block = await self._queue.get()
            if block is _STOP:
                break
            await self._push_with_retry(block)

    async def _push_with_retry(self, block: GeneratedBlock) -> None:
        delay = self.push_retry_initial_ms
        while True:
            try:
                await self.listener.on_push_block(block.block_id, block.records, block.num_records)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reported and retried; pushing never ends
                self.push_errors += 1
                self.listener.on_error(f"Error pushing block {block.block_id}; retrying in {delay:.0f} ms", exc)
                await self.clock.sleep(delay)
                delay = min(delay * 2, self.push_retry_max_ms)
        self.blocks_pushed += 1
        self._in_flight -= 1
        self._unpushed.discard(block.seq)
        self._pushed.notify_all()
