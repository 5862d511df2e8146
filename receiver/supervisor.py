"""``ReceiverSupervisor``: one receiver's pipeline, limiter → block generator → store → tracker.

It plays Spark's ``ReceiverSupervisorImpl``: registers the receiver with the tracker (which may
refuse), heartbeats, applies ``update_rate`` pushes to the limiter at once, obeys ``stop``, and
restarts a failed receiver after ``restart_delay_ms`` with the error reported.  Its block generator
listener writes each block to the block store (``asyncio.to_thread``: the fsync must not stall
the loop), sends ``add_block`` (the client retries until the tracker's durable ack) and only then
lets the receiver commit the offsets the block covers.

Stop order: the receiver stops storing, the generator makes the last block and pushes everything
queued (each acknowledged, offsets committed), the receiver releases its source, deregister.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any, Protocol

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.clock import Clock, SystemClock
from sluice.receiver.block_generator import BlockGenerator
from sluice.receiver.metrics import ReceiverMetrics
from sluice.receiver.rate_limiter import RateLimiter
from sluice.receiver.receiver import OffsetMeta, Receiver
from sluice.storage.block_format import EncodedPiece
from sluice.storage.block_store import Block, BlockStore

log = logging.getLogger(__name__)


class Tracker(Protocol):
    """The part of ``sluice.tracker.client.TrackerClient`` a supervisor uses."""

    async def register_receiver(
        self, stream_id: int, receiver_id: str, host: str, incarnation: int
    ) -> float | None: ...

    async def deregister_receiver(self, receiver_id: str, reason: str = "") -> None: ...

    async def heartbeat(self, receiver_id: str, lag: int | None = None) -> None: ...

    async def add_block(self, info: ReceivedBlockInfo) -> Any: ...

    async def report_error(self, stream_id: int, receiver_id: str, message: str, error: str = "") -> None: ...


class ReceiverState(enum.Enum):
    """Spark's receiver states: a receiver stops storing as soon as it is not ``STARTED``."""

    INITIALIZED = "initialized"
    STARTED = "started"
    STOPPED = "stopped"


def _error_text(error: BaseException | None) -> str:
    if error is None:
        return ""
    return "".join(traceback.format_exception_only(type(error), error)).strip()[:2000]


class ReceiverSupervisor:
    """Runs one receiver: its limiter, its block generator, its registration, heartbeats and restarts.

    :param receiver: the source (a :class:`~sluice.receiver.Receiver`).
    :param tracker: the tracker client (``register_receiver``, ``heartbeat``, ``add_block``, ...).
    :param block_store: where blocks are written before they are reported.
    :param stream_id: the stream the receiver feeds.
    :param receiver_id: its id, unique among the stream's receivers.
    :param host: reported at registration.
    :param max_rate: the limiter's cap (``receiver.max_rate``); ``None``: none.
    :param initial_rate: the limiter's rate until the tracker sends one; ``None``: unlimited.
    :param block_interval_ms: see :class:`~sluice.receiver.BlockGenerator`.
    :param block_queue_size: see :class:`~sluice.receiver.BlockGenerator`.
    :param max_block_records: see :class:`~sluice.receiver.BlockGenerator`.
    :param max_block_bytes: see :class:`~sluice.receiver.BlockGenerator`.
    :param restart_delay_ms: wait before a failed receiver starts again.
    :param heartbeat_interval_ms: heartbeat to the tracker this often.
    :param clock: for the limiter, the block timer and the heartbeats (a ``ManualClock`` in tests).
    """

    def __init__(
        self,
        receiver: Receiver,
        tracker: Tracker,
        block_store: BlockStore,
        *,
        stream_id: int,
        receiver_id: str,
        host: str = "localhost",
        max_rate: float | None = None,
        initial_rate: float | None = None,
        block_interval_ms: float = 200,
        block_queue_size: int = 10,
        max_block_records: int = 100_000,
        max_block_bytes: int | None = 64 << 20,
        restart_delay_ms: float = 2000,
        heartbeat_interval_ms: float = 2000,
        clock: Clock | None = None,
    ) -> None:
        self.receiver = receiver
        self.tracker = tracker
        self.store = block_store
        self.stream_id = stream_id
        self.receiver_id = receiver_id
        self.host = host
        self.restart_delay_ms = restart_delay_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.clock: Clock = clock or SystemClock()
        self.metrics = ReceiverMetrics(stream_id, receiver_id)
        self.limiter = RateLimiter(rate=initial_rate, max_rate=max_rate, clock=self.clock)
        self.generator = BlockGenerator(
            self,
            stream_id,
            receiver_id,
            block_interval_ms=block_interval_ms,
            block_queue_size=block_queue_size,
            max_block_records=max_block_records,
            max_block_bytes=max_block_bytes,
            rate_limiter=self.limiter,
            clock=self.clock,
        )
        self.state = ReceiverState.INITIALIZED
        self._current_ranges: dict[tuple[str, int], list[int]] = {}
        self._block_ranges: dict[str, tuple[OffsetRange, ...]] = {}
        self._control: asyncio.Lock | None = None
        self._heartbeat: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        self._terminated: asyncio.Event | None = None
        self._stopping = False
        self.stopping_error: BaseException | None = None
        self.refused = False
        self.records_stored = 0
        receiver.attach_supervisor(self)
        self.metrics.rate_limit.set(self.limiter.rate)

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the block generator, then register and start the receiver (Spark's order)."""
        self._control = asyncio.Lock()
        self._terminated = asyncio.Event()
        self.generator.start()
        self._heartbeat = asyncio.get_running_loop().create_task(
            self._heartbeats(), name=f"heartbeat-{self.receiver_id}"
        )
        await self._start_receiver()

    async def _start_receiver(self) -> None:
        assert self._control is not None
        async with self._control:
            if self._stopping:
                return
            try:
                share = await self.tracker.register_receiver(
                    self.stream_id, self.receiver_id, self.host, int(time.time() * 1000)
                )
            except Exception as exc:  # noqa: BLE001 - the tracker said no, or is unreachable for long
                self.refused = True
                self._background_task(
                    self.stop(f"Registered unsuccessfully: the tracker refused receiver {self.receiver_id}", exc)
                )
                return
            self.update_rate(share)
            self.state = ReceiverState.STARTED
            try:
                await self.receiver.on_start()
            except Exception as exc:  # noqa: BLE001 - Spark stops here; a worker keeps trying instead
                self.request_restart(f"Error starting receiver {self.receiver_id}", exc, None)
                return
            log.info("receiver %s of stream %d started (rate %s)", self.receiver_id, self.stream_id, self.limiter.rate)

    async def _stop_receiver(self, message: str, error: BaseException | None) -> None:
        """Stop storing, push what is held (offsets committed), release the source, deregister."""
        if self.state != ReceiverState.STARTED:
            return
        self.state = ReceiverState.STOPPED
        try:
            await self.receiver.on_stop()
        except Exception as exc:  # noqa: BLE001
            log.warning("receiver %s on_stop failed: %s", self.receiver_id, exc)
        await self.receiver.cancel_tasks()
        await self.generator.flush()
        try:
            await self.receiver.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("receiver %s close failed: %s", self.receiver_id, exc)
        try:
            await self.tracker.deregister_receiver(
                self.receiver_id, (message + (f": {_error_text(error)}" if error else ""))[:2000]
            )
        except Exception as exc:  # noqa: BLE001 - the tracker also notices silence
            log.warning("deregistering %s failed: %s", self.receiver_id, exc)

    def request_restart(self, message: str, error: BaseException | None, delay_ms: float | None) -> None:
        if self._stopping:
            return
        self._background_task(self.restart_receiver(message, error, delay_ms))

    async def restart_receiver(
        self, message: str, error: BaseException | None = None, delay_ms: float | None = None
    ) -> None:
        """Spark's ``restartReceiver``: report, stop the receiver, wait, start it again."""
        assert self._control is not None
        delay = self.restart_delay_ms if delay_ms is None else delay_ms
        log.warning("restarting receiver %s in %.0f ms: %s %s", self.receiver_id, delay, message, _error_text(error))
        self.metrics.restarts.inc()
        self.report_error(message, error)
        async with self._control:
            await self._stop_receiver(message, error)
        await self.clock.sleep(delay)
        await self._start_receiver()

    def request_stop(self, message: str, error: BaseException | None = None) -> None:
        self._background_task(self.stop(message, error))

    async def stop(self, message: str = "stopped", error: BaseException | None = None) -> None:
        """Stop for good: receiver, then the generator (last block pushed and acknowledged)."""
        if self._control is None:  # never started: nothing to push
            self._stopping = True
            return
        if self._stopping:
            if self._terminated is not None:
                await self._terminated.wait()
            return
        self._stopping = True
        self.stopping_error = error
        log.info("stopping receiver %s: %s", self.receiver_id, message)
        assert self._control is not None and self._terminated is not None
        async with self._control:
            await self._stop_receiver(message, error)
        await self.generator.stop()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        for task in list(self._background):
            if task is not asyncio.current_task():
                task.cancel()
        self._terminated.set()

    def unacknowledged_blocks(self) -> int:
        """Blocks made and not yet acknowledged by the tracker, counting a non-empty buffer as one."""
        return self.generator.blocks_held + (1 if self.generator.buffered_records else 0)

    async def abandon(self) -> None:
        """After a stop ran out of time: drop every held block and release the source.

        Nothing held is acknowledged, so nothing of it is committed: a Kafka source reads it again.
        """
        self._stopping = True
        self.state = ReceiverState.STOPPED
        self.generator.abort()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        for task in list(self._background):
            task.cancel()
        await self.receiver.cancel_tasks()
        try:
            await self.receiver.close()
        except Exception as exc:  # noqa: BLE001 - the process is going away regardless
            log.warning("receiver %s close failed: %s", self.receiver_id, exc)
        if self._terminated is not None:
            self._terminated.set()

    async def await_termination(self) -> None:
        assert self._terminated is not None
        await self._terminated.wait()
        if self.stopping_error is not None:
            raise self.stopping_error

    def is_receiver_started(self) -> bool:
        return self.state == ReceiverState.STARTED

    def is_receiver_stopped(self) -> bool:
        return self.state == ReceiverState.STOPPED

    def _background_task(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- tracker pushes ---------------------------------------------------------------------------
    def update_rate(self, rate: float | None) -> None:
        """Apply the tracker's share at once; <= 0 or None is ignored (Spark's ``updateRate``)."""
        if rate is None:
            return
        self.limiter.set_rate(rate)
        self.metrics.rate_limit.set(self.limiter.rate)

    async def _heartbeats(self) -> None:
        while True:
            await self.clock.sleep(self.heartbeat_interval_ms)
            try:
                await self.tracker.heartbeat(self.receiver_id, self.receiver.lag())
            except asyncio.CancelledError:
                raise
            except ConnectionError as exc:  # an outage: the tracker client says so, at a bounded rate
                log.debug("heartbeat of %s failed: %s", self.receiver_id, exc)
            except Exception as exc:  # noqa: BLE001 - next one may get through
                log.warning("heartbeat of %s failed: %s", self.receiver_id, exc)

    def report_error(self, message: str, error: BaseException | None = None) -> None:
        """Log, count and tell the tracker (fire and forget: reporting must not block receiving)."""
        log.warning("receiver %s: %s %s", self.receiver_id, message, _error_text(error))

        async def send() -> None:
            try:
                await self.tracker.report_error(self.stream_id, self.receiver_id, message[:2000], _error_text(error))
            except Exception as exc:  # noqa: BLE001
                log.debug("report_error to the tracker failed: %s", exc)

        self._background_task(send())

    # -- data path --------------------------------------------------------------------------------
    async def push_single(self, item: Any) -> None:
        self._count_stored(1, await self.generator.add_data(item))

    def piece_size(self) -> int:
        """The most records one acquire should take: one block interval's worth at the current rate.

        A larger acquire is paid by a wait as long as the records are many (a 2,000-line socket
        read at 100/s: 20 s), so the blocks of that wait stay empty and so do the batches: the
        estimator learns nothing from them.  Pieces this size keep every block fed at any rate.
        """
        rate = self.limiter.rate
        if math.isinf(rate):
            return sys.maxsize
        return max(1, int(rate * self.generator.block_interval_ms / 1000.0))

    async def push_many(self, items: Sequence[Any], metadata: OffsetMeta | None) -> None:
        """Store ``items``; without ``metadata``, in pieces of at most :meth:`piece_size` records.

        With metadata the records go into one block together (the offset range describes them
        all), so a source with offsets cuts its reads itself (see ``KafkaReceiver``).
        """
        if not items:
            return
        size = self.piece_size()
        if metadata is not None or len(items) <= size:
            await self._push_piece(items, metadata)
            return
        start = 0
        while start < len(items):
            piece = items[start : start + size]
            await self._push_piece(piece, None)
            start += len(piece)
            size = self.piece_size()  # the rate may have changed while this piece waited

    async def _push_piece(self, items: Sequence[Any], metadata: OffsetMeta | None) -> None:
        waited = await self.generator.add_multiple_data_with_callback(items, metadata)
        self._count_stored(len(items), waited)

    def _count_stored(self, count: int, waited: float) -> None:
        self.records_stored += count
        self.metrics.records.inc(count)
        if waited:
            self.metrics.limiter_wait.inc(waited)

    async def push_encoded(self, piece: EncodedPiece, metadata: OffsetMeta) -> None:
        waited = await self.generator.add_encoded_with_callback(piece, metadata)
        self._count_stored(piece.num_records, waited)

    async def flush_blocks(self) -> None:
        await self.generator.flush()

    # -- BlockGeneratorListener -------------------------------------------------------------------
    def on_add_data(self, data: Any, metadata: Any) -> None:
        if not metadata:
            return
        ranges = self._current_ranges
        for tp, (start, until) in metadata.items():
            current = ranges.get(tp)
            if current is None:
                ranges[tp] = [start, until]
            else:
                if start < current[0]:
                    current[0] = start
                if until > current[1]:
                    current[1] = until

    def on_generate_block(self, block_id: str) -> None:
        if self._current_ranges:
            self._block_ranges[block_id] = tuple(
                OffsetRange(t, p, r[0], r[1]) for (t, p), r in sorted(self._current_ranges.items())
            )
            self._current_ranges = {}
        self.metrics.blocks_held.set(self.generator.blocks_held + 1)
        self.metrics.queue_depth.set(self.generator.queue_depth)

    async def on_push_block(self, block_id: str, records: list, num_records: int) -> None:
        started = time.perf_counter()
        ranges = self._block_ranges.get(block_id, ())
        parts = self.store.encode(Block(self.stream_id, block_id, records, ranges))
        location = await asyncio.to_thread(self.store.write_encoded, self.stream_id, block_id, parts)
        info = ReceivedBlockInfo(self.stream_id, block_id, self.receiver_id, num_records, location, ranges)
        result = await self.tracker.add_block(info)
        self._block_ranges.pop(block_id, None)
        self.metrics.push_seconds.observe(time.perf_counter() - started)
        self.metrics.blocks_pushed.inc()
        self.metrics.blocks_held.set(max(0, self.generator.blocks_held - 1))
        self.metrics.queue_depth.set(self.generator.queue_depth)
        if not getattr(result, "accepted", True):
            log.info(
                "block %s of %s was a duplicate of records already added; dropped by the tracker",
                block_id,
                self.receiver_id,
            )
        if ranges:
            try:
                await self.receiver.on_block_acknowledged(block_id, ranges)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the block is safe; a later commit covers these offsets
                self.metrics.error("commit")
                log.warning("after block %s was acknowledged, committing its offsets failed: %s", block_id, exc)

    def on_error(self, message: str, error: BaseException | None) -> None:
        self.metrics.error("push")
        self.report_error(message, error)


def rate_or_none(value: float | None) -> float | None:
    """Config's 0 means 'none'."""
    return value if value is not None and value > 0 and not math.isinf(value) else None
