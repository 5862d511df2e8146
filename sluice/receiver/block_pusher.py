"""``BlockPusher``: one receiver's data path, records → block → block store → tracker → offset commit.

It plays the data half of Spark's ``ReceiverSupervisorImpl`` (``pushSingle``, ``pushArrayBuffer``,
``pushAndReportBlock``) and is its block generator's listener: each block is written to the block
store (``asyncio.to_thread``: the fsync must not stall the loop), reported with ``add_block`` (the
client retries until the tracker's durable ack, waiting while the tracker answers ``busy``), and only
then does the receiver commit offsets the tracker holds: the remaining ranges of a block it trimmed,
and all of one it dropped as a duplicate (each logged and counted).  A dropped block's offsets were
added before and the reply waited for the log, so they are durable at the tracker; committing them
is what lets a receiver that re-reads after a failed commit move on (without it, a rebalance before
the next new block was acknowledged sent it back to the same offset, again and again).  The id a
block is reported under carries the incarnation the tracker gave the receiver's registration
(``input-<stream>-<receiver>-<incarnation>-<time>``), formed at its first push attempt and kept
for its retries, which rewrite the same file: the tracker takes the previous registration's ids
too, so a retry across one re-registration leaves no second file.  An id the tracker no longer takes
(``forbidden``) has its file deleted and the block is re-formed under the current registration.
Starting, stopping and restarting belong to
:class:`~sluice.receiver.supervisor.ReceiverSupervisor`, which drives :attr:`BlockPusher.generator`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from sluice.block_info import OLDEST_TIMESTAMP, OffsetRange, ReceivedBlockInfo, block_id_prefix
from sluice.clock import Clock
from sluice.kafka.record_batches import KafkaBatches
from sluice.receiver.block_generator import BlockGenerator
from sluice.receiver.metrics import ReceiverMetrics
from sluice.receiver.rate_limiter import RateLimiter
from sluice.receiver.receiver import OffsetMeta, Receiver
from sluice.stages import STAMPS, STORED, PieceStamps, now_ms
from sluice.storage.block_format import EncodedPiece, KafkaPiece
from sluice.storage.block_store import Block, BlockStore
from sluice.tracker.wire.protocol import E_FORBIDDEN, RemoteError
from sluice.tracker.wire.results import AddBlockResult

log = logging.getLogger(__name__)


class BlockSink(Protocol):
    """The part of ``sluice.tracker.client.tracker_client.TrackerClient`` the data path uses."""

    async def add_block(self, info: ReceivedBlockInfo) -> AddBlockResult: ...

    def incarnation(self, receiver_id: str) -> int | None: ...


class BlockPusher:
    """Stores a receiver's records into blocks and reports each block to the tracker, in order.

    :param receiver: told of each acknowledged block (``on_block_acknowledged`` commits its offsets).
    :param tracker: where blocks are reported (``add_block``).
    :param block_store: where blocks are written before they are reported.
    :param limiter: admits records before they are buffered (its rate sizes :meth:`piece_size`).
    :param metrics: the receiver's metric children.
    :param report_error: reports a push failure (the supervisor logs it and tells the tracker).
    :param stream_id: the stream the blocks belong to.
    :param receiver_id: the receiver, part of every block id.
    :param block_interval_ms: see :class:`~sluice.receiver.BlockGenerator`.
    :param block_lead_ms: see :class:`~sluice.receiver.BlockGenerator`.
    :param block_queue_size: see :class:`~sluice.receiver.BlockGenerator`.
    :param max_block_records: see :class:`~sluice.receiver.BlockGenerator`.
    :param max_block_bytes: see :class:`~sluice.receiver.BlockGenerator`.
    :param clock: the block timer's clock.
    """

    def __init__(
        self,
        receiver: Receiver,
        tracker: BlockSink,
        block_store: BlockStore,
        limiter: RateLimiter,
        metrics: ReceiverMetrics,
        report_error: Callable[[str, BaseException | None], None],
        *,
        stream_id: int,
        receiver_id: str,
        block_interval_ms: float,
        block_lead_ms: float,
        block_queue_size: int,
        max_block_records: int,
        max_block_bytes: int | None,
        clock: Clock,
    ) -> None:
        self.receiver = receiver
        self.tracker = tracker
        self.store = block_store
        self.limiter = limiter
        self.metrics = metrics
        self.report_error = report_error
        self.stream_id = stream_id
        self.receiver_id = receiver_id
        self.generator = BlockGenerator(
            self,
            stream_id,
            receiver_id,
            block_interval_ms=block_interval_ms,
            block_lead_ms=block_lead_ms,
            block_queue_size=block_queue_size,
            max_block_records=max_block_records,
            max_block_bytes=max_block_bytes,
            rate_limiter=limiter,
            clock=clock,
        )
        self.records_stored = 0
        self._current_ranges: dict[tuple[str, int], list[int]] = {}
        self._block_ranges: dict[str, tuple[OffsetRange, ...]] = {}
        # the oldest Kafka timestamp of the buffer's records, then of each block until acknowledged:
        # the tracker's time behind (sluice_stream_lag_seconds) reads it from the block's metadata
        self._current_oldest = -1
        self._block_oldest: dict[str, int] = {}
        self._wire_ids: dict[str, str] = {}  # block id -> the id it is reported under, until acknowledged
        # the fetch and admission times of the buffer's first and last pieces, then each block's
        # stamps (sluice.stages) until acknowledged: the driver splits a record's latency by them
        self._current_stamps = PieceStamps()
        self._block_stamps: dict[str, dict[str, Any]] = {}

    # -- storing ----------------------------------------------------------------------------------
    async def push_single(self, item: Any) -> None:
        fetched = now_ms()
        waited = await self.generator.add_data(item)
        self._current_stamps.add(fetched, now_ms())  # no await since the append: still the buffer's
        self._count_stored(1, waited)

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
        fetched = now_ms()
        waited = await self.generator.add_multiple_data_with_callback(items, metadata)
        self._current_stamps.add(fetched, now_ms())
        self._count_stored(len(items), waited)

    async def push_encoded(self, piece: EncodedPiece, metadata: OffsetMeta, fetched_ms: int | None = None) -> None:
        """Store ``piece``; ``fetched_ms``: when it arrived, if earlier than now (a fetch response
        whose earlier pieces the limiter held: the wait is the limiter's, not the broker's)."""
        fetched = now_ms() if fetched_ms is None else fetched_ms
        waited = await self.generator.add_encoded_with_callback(piece, metadata)
        # the generator's append and this line run with no await between: the piece is still in
        # the buffer these stamps describe
        self._current_stamps.add(fetched, now_ms(), piece.oldest_timestamp_ms, piece.last_timestamp_ms)
        self._count_stored(piece.num_records, waited)

    def _count_stored(self, count: int, waited: float) -> None:
        self.records_stored += count
        self.metrics.records.inc(count)
        if waited:
            self.metrics.limiter_wait.inc(waited)

    async def flush(self) -> None:
        """Cut a block of what is held and wait until it and every earlier one is acknowledged."""
        await self.generator.flush()

    def unacknowledged_blocks(self) -> int:
        """Blocks made and not yet acknowledged by the tracker, counting a non-empty buffer as one."""
        return self.generator.blocks_held + (1 if self.generator.buffered_records else 0)

    # -- BlockGeneratorListener -------------------------------------------------------------------
    def on_add_data(self, data: Any, metadata: Any) -> None:
        if isinstance(data, (KafkaPiece, KafkaBatches)):
            oldest = data.oldest_timestamp_ms
            if oldest >= 0 and (self._current_oldest < 0 or oldest < self._current_oldest):
                self._current_oldest = oldest
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
        if self._current_oldest >= 0:
            self._block_oldest[block_id] = self._current_oldest
            self._current_oldest = -1
        if self._current_stamps.pieces:
            self._block_stamps[block_id] = self._current_stamps.block_stamps(now_ms())
            self._current_stamps = PieceStamps()
        self.metrics.blocks_held.set(self.generator.blocks_held + 1)
        self.metrics.queue_depth.set(self.generator.queue_depth)

    def wire_id(self, block_id: str) -> str:
        """The id ``block_id`` is reported under: in the id space of the current registration."""
        incarnation = self.tracker.incarnation(self.receiver_id)
        prefix = block_id_prefix(self.stream_id, self.receiver_id)
        return block_id_prefix(self.stream_id, self.receiver_id, incarnation) + block_id.removeprefix(prefix)

    async def on_push_block(self, block_id: str, records: list, num_records: int) -> None:
        started = time.perf_counter()
        ranges = self._block_ranges.get(block_id, ())
        wire_id = self._wire_ids.get(block_id)
        if wire_id is None:
            wire_id = self._wire_ids[block_id] = self.wire_id(block_id)
        parts = self.store.encode(Block(self.stream_id, wire_id, records, ranges))
        location = await asyncio.to_thread(self.store.write_encoded, self.stream_id, wire_id, parts)
        oldest = self._block_oldest.get(block_id)
        metadata: dict[str, Any] = {OLDEST_TIMESTAMP: oldest} if oldest is not None else {}
        stamps = self._block_stamps.get(block_id)
        if stamps is not None:
            metadata[STAMPS] = {**stamps, STORED: now_ms()}
        info = ReceivedBlockInfo(self.stream_id, wire_id, self.receiver_id, num_records, location, ranges, metadata)
        try:
            result = await self.tracker.add_block(info)
        except RemoteError as exc:
            if exc.code == E_FORBIDDEN:  # an id of a registration before the previous: re-formed next attempt
                del self._wire_ids[block_id]
                await self._delete_unreported(wire_id, location)
            raise
        del self._wire_ids[block_id]
        self._block_ranges.pop(block_id, None)
        self._block_oldest.pop(block_id, None)
        self._block_stamps.pop(block_id, None)
        self.metrics.push_seconds.observe(time.perf_counter() - started)
        self.metrics.blocks_pushed.inc()
        self.metrics.blocks_held.set(max(0, self.generator.blocks_held - 1))
        self.metrics.queue_depth.set(self.generator.queue_depth)
        held = self._held_ranges(wire_id, ranges, result)
        if not result.accepted:
            await self._delete_unreported(block_id, location)
        if held:
            try:
                await self.receiver.on_block_acknowledged(wire_id, held)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the block is safe; a later commit covers these offsets
                self.metrics.error("commit")
                log.warning("after block %s was acknowledged, committing its offsets failed: %s", block_id, exc)

    def _held_ranges(
        self, block_id: str, ranges: tuple[OffsetRange, ...], result: AddBlockResult
    ) -> tuple[OffsetRange, ...]:
        """The offset ranges the tracker holds, durably: what may be committed at the source."""
        if not result.accepted or result.info is None:
            if ranges:
                self.metrics.refused("duplicate")
                log.warning(
                    "block %s of %s was dropped by the tracker: every offset of %s was added before; "
                    "committing them (the tracker holds them)",
                    block_id,
                    self.receiver_id,
                    _show(ranges),
                )
            return ranges
        kept = result.info.offset_ranges
        if kept != ranges:
            self.metrics.refused("trimmed")
            log.warning(
                "block %s of %s was trimmed by the tracker to %s (sent %s): offsets already added elsewhere",
                block_id,
                self.receiver_id,
                _show(kept),
                _show(ranges),
            )
        return kept

    async def _delete_unreported(self, block_id: str, location: str) -> None:
        """Delete a block file the tracker dropped or refused: it never entered the tracker, so no
        batch reads it and no driver cleanup will ever name it (a block id seen before gets its first
        answer, so a recorded block is never answered "dropped" while a batch may still read it)."""
        try:
            await asyncio.to_thread(self.store.delete, location)
        except Exception as exc:  # noqa: BLE001 - a leftover file costs space, never records
            log.warning("block %s never entered the tracker but could not be deleted: %s", block_id, exc)

    def on_error(self, message: str, error: BaseException | None) -> None:
        self.metrics.error("push")
        self.report_error(message, error)


def _show(ranges: tuple[OffsetRange, ...]) -> str:
    shown = ", ".join(f"{r.topic}/{r.partition}[{r.from_offset}, {r.until_offset})" for r in ranges[:4])
    return shown + (f" and {len(ranges) - 4} more" if len(ranges) > 4 else "")
