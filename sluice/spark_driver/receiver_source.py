"""Receiver mode's :class:`~sluice.spark_driver.source.BatchSource`: the tracker decides, the block store holds.

Each tick calls ``allocate_blocks(batch_time, max_records)`` (the tracker logs ``BatchAllocated``
before it answers, so the allocation survives a crash of either side) and builds a block RDD from
the answer.  ``max_records`` bounds each stream's batch by its current rate: blocks that piled up
while the driver was down drain over several batches, in order, instead of making one huge batch.
On restart the tracker's ``pending_batches`` are the batches allocated but not completed:
``get_blocks_of_batch`` returns exactly their blocks again, so a re-run reads the same input.
Completion goes back with ``batch_completed``; the tracker answers with the blocks that fell out
of its remember window and the driver deletes them from the store (Spark's
``cleanupOldBlocksAndBatches``; :mod:`~sluice.spark_driver.block_stores`), because the driver is
the last reader: one bulk delete per store where the store has one.  The next ``batch_completed``
says they are deleted and only then does the tracker forget them: a driver killed before deleting
is told again after its restart, and a delete that failed is tried again, so no block file is left
that nothing will delete.
``block_store_options`` (the ``[block_store.options]`` table) open non-file stores, on the driver
and, with what :func:`~sluice.storage.fsspec_store.task_options` adds, in tasks.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlsplit

from sluice.block_columns import BlockColumns
from sluice.block_info import MAX_INT, ReceivedBlockInfo
from sluice.spark_driver.batch import Batch, BatchInfo
from sluice.spark_driver.block_rdd import EarliestParam, block_rdd
from sluice.spark_driver.block_stores import delete_blocks, refusal, store_options
from sluice.spark_driver.metrics import BLOCKS_REFUSED
from sluice.spark_driver.source import SourceContext, SourceError
from sluice.stages import now_ms
from sluice.storage.block_store import store_root
from sluice.tracker.admin import skip_block_command
from sluice.tracker.client.connection import TrackerUnavailable
from sluice.tracker.client.sync_client import SyncTrackerClient

if TYPE_CHECKING:  # pragma: no cover - the client is loaded when the source starts
    from pyspark.accumulators import AccumulatorParam

    from sluice.tracker.client.tracker_client import Cleanup
from sluice.spark_driver.bad_record_counts import BadRecordCounts
from sluice.storage.dead_letters import BadRecordHandling

log = logging.getLogger(__name__)

#: A batch takes up to this much more than the rate allows for one interval.  The receivers run at
#: that rate, so a batch bounded at exactly rate x interval would fall behind by every block that
#: straddles a batch boundary and every burst the limiter stored; 10 % more drains such a lag (and a
#: backlog) by a tenth of an interval's records per batch, without letting one batch take it whole.
BATCH_HEADROOM = 0.1

#: How long :meth:`ReceiverSource.preflight` tries to reach the tracker: a refusal comes back in
#: one round trip, and a longer wait would only delay the start that waits for the tracker anyway.
PREFLIGHT_CONNECT_S = 2.0


def batch_bound(rate: float, interval_ms: int) -> int:
    """The most records one batch takes at ``rate`` for one interval, :data:`BATCH_HEADROOM` included."""
    return max(1, int(rate * interval_ms / 1000 * (1 + BATCH_HEADROOM)))


class Closes(Protocol):
    """A tracker client as far as closing it goes."""

    def close(self) -> None: ...


class DriverTrackerClient(Closes, Protocol):
    """The tracker calls receiver mode makes: the part of
    :class:`~sluice.tracker.client.sync_client.SyncTrackerClient` a driver uses (a test may give
    its own, through ``client_factory``)."""

    def start(self) -> None: ...

    def stop_waiting(self) -> None: ...

    def status(self, *, leader: bool = False) -> dict[str, Any]: ...

    def allocate_blocks(
        self, batch_time_ms: int, max_records: Mapping[int, int] | None = None
    ) -> Mapping[int, Sequence[ReceivedBlockInfo]] | None: ...

    def get_blocks_of_batch(self, batch_time_ms: int) -> Mapping[int, Sequence[ReceivedBlockInfo]]: ...

    def batch_completed(self, batch_info: dict[str, Any], deleted_through_ms: int | None = None) -> Cleanup: ...

    def publish_rate(self, stream_id: int, rate: float) -> None: ...


def close_client(client: Closes | None) -> None:
    """Close a tracker client (``None``: nothing to close); a broken connection is not an error."""
    if client is None:
        return
    try:
        client.close()
    except Exception:  # closing a broken connection is not an error
        log.debug("closing the tracker client failed", exc_info=True)


_BAD_RECORD = re.compile(r"Kafka record \S+ offsets? \S+ cannot be decoded.*?to go on without it")


def _by_stream(mapping: dict[Any, Any], stream_id: int) -> Any:
    """msgpack maps may come back with int or str keys; accept both."""
    if stream_id in mapping:
        return mapping[stream_id]
    return mapping.get(str(stream_id))


class ReceiverSource:
    """Batches from the blocks receivers stored and reported to the tracker.

    :param tracker: the tracker's ``HOST:PORT``.
    :param auth_token: sent in ``hello``.
    :param block_store: the store URL tasks read blocks from; default the one each location names
        (in-process callers only: ``sluice-driver`` always gives ``driver.block_store``).
    :param block_store_options: the storage options of a non-file store (``[block_store.options]``).
    :param client_factory: builds the tracker client (tests); default a ``SyncTrackerClient``.
    :param request_timeout: seconds a tracker request may take.
    :param ssl: the client TLS context (``driver.tls_ca``/``tls_cert``/``tls_key``); None: plain TCP.
    :param on_refused: ``driver.on_batch_failure`` for a block whose location is refused: ``skip``
        leaves that block out of its batch (the stream goes on), ``stop`` fails the batch.
    :param max_partitions: ``driver.max_batch_partitions``: a batch's blocks in at most this many
        partitions (0: one per block).
    :param min_partitions: ``driver.min_batch_partitions``: a batch of fewer blocks has its large
        ones read in slices (0: the Spark context's default parallelism; 1: never).
    :param bad_records: ``driver.bad_records``: what a task does with a Kafka record that cannot be
        decoded (:mod:`~sluice.storage.dead_letters`): ``fail``, ``skip`` or ``dead-letter``.
    :param dead_letter: ``driver.dead_letter``: the store URL ``dead-letter`` keeps them in.
    """

    def __init__(
        self,
        tracker: str,
        *,
        auth_token: str | None = None,
        block_store: str | None = None,
        block_store_options: Mapping[str, Any] | None = None,
        client_factory: Callable[..., DriverTrackerClient] | None = None,
        request_timeout: float = 10.0,
        bounded: bool = True,
        ssl: Any = None,
        on_refused: str = "stop",
        max_partitions: int = 0,
        min_partitions: int = 0,
        bad_records: str = "fail",
        dead_letter: str = "",
    ) -> None:
        self._bad = BadRecordCounts(bad_records, dead_letter)
        self.bad_records, self.dead_letter = self._bad.policy, self._bad.dead_letter
        self.tracker = tracker
        self.bounded = bounded  # False: Spark's allocation, every queued block into the next batch
        self.auth_token = auth_token
        self.ssl = ssl
        self.on_refused = on_refused
        self.max_partitions = max_partitions
        self.min_partitions = min_partitions
        self.block_store = store_root(block_store) if block_store else None
        self.block_store_options = dict(block_store_options or {})
        self._task_options: dict[str, dict[str, Any]] = {}
        self.request_timeout = request_timeout
        self._client_factory = client_factory
        self.client: DriverTrackerClient | None = None
        self.context: SourceContext | None = None
        self._status: dict[str, Any] = {}
        self._unanswered: int | None = None  # an allocate_blocks the tracker may have done, unanswered
        self._cleanup_lock = threading.Lock()  # completions may run on several job threads
        self._deleted_through_ms: int | None = None  # the tracker named these batches' blocks; deleted
        self._client_lock = threading.Lock()  # stop() may come from another thread while start() connects
        self._stopped = False

    # -- lifecycle -----------------------------------------------------------------------------

    def preflight(self, options: dict[str, Any], batch_interval_ms: int) -> None:
        """Say ``hello`` to the tracker and let go: ``sluice-driver`` calls it before Spark starts,
        so a credential the tracker refuses stops the driver in seconds (``TrackerAuthError``), not
        after a JVM start.  A tracker not reached within :data:`PREFLIGHT_CONNECT_S` is
        :meth:`start`'s to wait for, as it waits for one down at any time."""
        client = SyncTrackerClient(
            self.tracker, "driver", auth_token=self.auth_token, ssl=self.ssl, connect_timeout=PREFLIGHT_CONNECT_S
        )
        try:
            client.start()
        except TrackerUnavailable:
            return
        finally:
            client.close()

    def start(self, context: SourceContext) -> None:
        self.context = context
        client: DriverTrackerClient
        if self._client_factory is None:
            client = SyncTrackerClient(
                self.tracker, "driver", auth_token=self.auth_token, request_timeout=self.request_timeout, ssl=self.ssl
            )
        else:
            client = self._client_factory(self.tracker, "driver", auth_token=self.auth_token)
        with self._client_lock:
            stopped, self.client = self._stopped, client
        if stopped:
            close_client(client)
            raise SourceError(f"the source of the tracker at {self.tracker} was stopped while starting")
        client.start()  # a stop() meanwhile closes it, and this raises
        # the leader's: a standby answers status from its copy of the log, empty while it has not
        # read it, and a driver that took that for the truth would never re-run its pending batches
        self._status = client.status(leader=True)

    def stop(self) -> None:
        with self._client_lock:
            self._stopped = True
            client, self.client = self.client, None
        close_client(client)

    def stop_waiting(self) -> None:
        """The driver is stopping: tracker calls fail at once while the connection is lost."""
        client = self.client
        if client is not None:
            client.stop_waiting()

    # -- restart ---------------------------------------------------------------------------------

    def latest_published_rate(self, stream_id: int = 0) -> float | None:
        rate = _by_stream(self._status.get("rates") or {}, stream_id)
        return float(rate) if rate is not None and rate > 0 else None

    def recover(self) -> list[int]:
        return sorted(int(t) for t in self._status.get("pending_batches") or [])

    def last_batch_time(self) -> int | None:
        """The latest batch time the tracker ever allocated (its status at registration)."""
        last = self._status.get("last_allocated_batch_ms")
        return last if isinstance(last, int) and not isinstance(last, bool) else None

    def rebuild_batch(self, batch_time_ms: int) -> Batch:
        blocks = self._client().get_blocks_of_batch(batch_time_ms)
        return self._batch(batch_time_ms, blocks or {})

    # -- batches -------------------------------------------------------------------------------

    def create_batch(self, batch_time_ms: int, rate: float | None) -> Batch | None:
        """The batch of this tick's allocation; first, the batch of an earlier tick whose
        ``allocate_blocks`` went unanswered if the tracker did allocate it (then this tick allocates
        nothing: the next one takes what arrived meanwhile).

        A lost reply is not a lost allocation: the tracker may have logged it, and it never allocates
        a batch time twice, so without this its blocks would wait, allocated and pending, for the
        next driver restart (Spark's JobGenerator allocates in-process and cannot lose the answer).
        """
        client = self._client()
        if self._unanswered is not None:
            earlier = self._unanswered
            lost = client.get_blocks_of_batch(earlier)  # a ConnectionError keeps it for the next tick
            self._unanswered = None
            if lost:
                log.warning("batch %d: its allocation's reply was lost; the tracker had allocated it: run now", earlier)
                return self._batch(earlier, lost)
        try:
            blocks = client.allocate_blocks(batch_time_ms, self.max_records())
        except ConnectionError:
            self._unanswered = batch_time_ms
            raise
        allocated = now_ms()
        if blocks is None:
            return None
        batch = self._batch(batch_time_ms, blocks)
        batch.stamps.allocated = allocated
        return batch

    def max_records(self) -> dict[int, int] | None:
        """Per stream, the most records one batch takes: its capacity rate (the rate in force under
        the throughput target) for one batch interval, plus :data:`BATCH_HEADROOM`; None under
        ``once`` (one batch of everything), without rates, or when built with ``bounded=False``.
        """
        context = self.context
        assert context is not None, "ReceiverSource.start was not called"
        if not self.bounded or context.trigger == "once":
            return None
        limits = {}
        rate_of = context.capacity_rate or context.current_rate
        for stream_id in context.streams:
            rate = rate_of(stream_id)
            if rate is not None and rate > 0:
                limits[stream_id] = batch_bound(rate, context.batch_interval_ms)
        return limits or None

    def _batch(self, batch_time_ms: int, allocation: Mapping[int, Sequence[ReceivedBlockInfo]]) -> Batch:
        """The batch of an allocation, built from its columns: the blocks' record counts, locations
        and ranges are all the driver reads, so no block object is built unless the user's function
        asks ``batch.blocks`` for one."""
        assert self.context is not None, "ReceiverSource.start was not called"
        stream_records: dict[int, int] = {sid: 0 for sid in self.context.streams}
        parts = []
        for stream_id in sorted(allocation, key=int):
            given = allocation[stream_id]  # a list when the batch is rebuilt after a restart
            part = self._contained(batch_time_ms, given if isinstance(given, BlockColumns) else BlockColumns(given))
            parts.append(part)
            # each block holds at most 2**63 - 1 records, their sum may not: the tracker's log and
            # msgpack hold signed 64-bit integers, so a count past that is reported as the maximum
            total = stream_records.get(int(stream_id), 0) + sum(part.num_records)
            stream_records[int(stream_id)] = min(total, MAX_INT)
        blocks = BlockColumns.joined(parts)
        options = self._store_options(self.block_store or blocks.locations[0]) if blocks else None
        sc = self.context.spark.sparkContext
        task_started = sc.accumulator(0, cast("AccumulatorParam[int]", EarliestParam())) if blocks else None
        rdd = block_rdd(
            sc,
            blocks,
            self.block_store,
            options,
            bad_records=self._bad_record_handling(batch_time_ms),
            skip_refused=self.on_refused == "skip",
            max_partitions=self.max_partitions,
            min_partitions=self.min_partitions or sc.defaultParallelism,
            task_started=task_started,
        )
        return Batch(
            batch_time_ms,
            rdd,
            self.context.spark,
            num_records=min(sum(stream_records.values()), MAX_INT),
            blocks=blocks,
            offset_ranges=blocks.offset_ranges,
            stream_records=stream_records,
            metadata={
                "Description": f"{len(blocks)} block(s) from the tracker at {self.tracker}",
                "skipped_blocks": sum(len(given) for given in allocation.values()) - len(blocks),
            },
            task_started=task_started,
        )

    def _bad_record_handling(self, batch_time_ms: int) -> BadRecordHandling | None:
        """What the batch's tasks do with records that cannot be decoded; None: fail (the default)."""
        assert self.context is not None
        options = self._store_options(self.dead_letter) if self.dead_letter else None
        return self._bad.for_batch(self.context.spark, batch_time_ms, options)

    def _contained(self, batch_time_ms: int, blocks: BlockColumns) -> BlockColumns:
        """The blocks of a batch, a refused one left out under ``skip`` (its task would refuse it
        under ``stop`` and fail the batch: then on_batch_failure decides for the whole batch)."""
        if self.on_refused != "skip":
            return blocks
        reasons = map(refusal, blocks.locations, blocks.stream_ids, blocks.block_ids, repeat(self.block_store))
        refused = {i: why for i, why in enumerate(reasons) if why is not None}
        if not refused:
            return blocks
        for i, why in refused.items():
            BLOCKS_REFUSED.labels("read").inc()
            log.error(
                "batch %d: block %s left out (driver.on_batch_failure = skip): %s",
                batch_time_ms,
                blocks.block_ids[i],
                why,
            )
        return BlockColumns(info for i, info in enumerate(blocks) if i not in refused)

    def explain_failure(self, batch: Batch, error: BaseException) -> str | None:
        """For a batch that failed reading one of its blocks: which block, and the command that skips
        it (recorded in the tracker's log, so the next start re-runs the batch without it)."""

        text = f"{error!s}\n{getattr(error, 'java_exception', '')}"
        poison = _BAD_RECORD.search(text)
        if poison is not None:  # one record, not its block: the policy lets the stream go on
            return poison.group(0)
        blocks = batch.blocks if isinstance(batch.blocks, BlockColumns) else BlockColumns(batch.blocks)
        for stream_id, block_id in zip(blocks.stream_ids, blocks.block_ids):
            if f"block {block_id} " in text:
                return (
                    f"block {block_id} of stream {stream_id} cannot be read; to go on without it run "
                    f"`{skip_block_command(self.tracker, stream_id, block_id)}` and start the driver again"
                )
        return None

    def on_batch_completed(self, batch: Batch, info: BatchInfo) -> None:
        self._bad.completed(info.batch_time_ms)
        with self._cleanup_lock:
            deleted_through_ms = self._deleted_through_ms
        cleanup = self._client().batch_completed(info.to_wire(), deleted_through_ms)
        if self._delete_blocks(cleanup.deletable) and cleanup.through_ms is not None:
            with self._cleanup_lock:
                self._deleted_through_ms = max(cleanup.through_ms, self._deleted_through_ms or 0)

    def _store_options(self, url: str) -> dict[str, Any]:
        """Storage options for the store of ``url`` (none for ``file://``), what tasks need included."""
        scheme = urlsplit(url).scheme
        if scheme not in self._task_options:
            self._task_options[scheme] = store_options(url, self.block_store_options)
        return self._task_options[scheme]

    def _delete_blocks(self, blocks: list[ReceivedBlockInfo]) -> bool:
        return delete_blocks(blocks, self.block_store, self._store_options)

    # -- rates and draining ---------------------------------------------------------------------

    def publish_rate(self, rate: float, stream_id: int = 0) -> None:
        self._client().publish_rate(stream_id, float(rate))

    def has_more_available(self) -> bool:
        """Unallocated blocks at the tracker, or a receiver that reports lag (records behind)."""
        status = self._client().status(leader=True)  # a standby's copy may lag: not done yet
        self._status = status
        for stream in (status.get("streams") or {}).values():
            if (stream.get("unallocated_blocks") or 0) > 0 or (stream.get("unallocated_records") or 0) > 0:
                return True
        receivers = status.get("receivers") or {}
        for receiver in receivers.values() if isinstance(receivers, dict) else receivers:
            if isinstance(receiver, dict) and (receiver.get("lag") or 0) > 0:
                return True
        return False

    def backlog(self) -> dict[int, tuple[int | None, int | None]]:
        """Per stream: records in blocks not yet allocated to a batch, and the lag its live
        receivers last reported (``None`` when none reported one); one ``status`` call."""
        status = self._client().status(leader=True)
        lags: dict[int, int] = {}
        receivers = status.get("receivers") or {}
        for receiver in receivers.values() if isinstance(receivers, dict) else receivers:
            if isinstance(receiver, dict) and receiver.get("live") and receiver.get("lag") is not None:
                stream_id = int(receiver.get("stream_id", 0))
                lags[stream_id] = lags.get(stream_id, 0) + int(receiver["lag"])
        return {
            int(stream_id): (stream.get("unallocated_records"), lags.get(int(stream_id)))
            for stream_id, stream in (status.get("streams") or {}).items()
        }

    def _client(self) -> DriverTrackerClient:
        if self.client is None:
            raise SourceError(f"the tracker client for {self.tracker} is not started (or already stopped)")
        return self.client
