"""``spark.readStream.format("sluice")``: Structured Streaming over the tracker's queued blocks.

The offset of a stream is the sequence number of the next block to read: the tracker numbers each
block it queues, durably (:mod:`sluice.tracker.server.received_block_tracker`), so an offset Spark
checkpointed means the same blocks after any restart.  ``latestOffset`` asks the tracker for the
queued blocks after ``start`` that fit the batch's bound (:mod:`~sluice.spark_driver.structured.limits`)
and ends after the last one; ``partitions`` lists exactly the blocks between two offsets, one
partition each, read in a task from the block store with its CRC checked (the block RDD's reader,
:func:`~sluice.spark_driver.block_rdd.read_block_records`, trimmed offsets included); ``commit(end)``
deletes the blocks before ``end`` and then tells the tracker the query is done with them.

Spark calls ``commit(end)`` only once the batch that read up to ``end`` is in the query's commit
log, and re-plans an uncommitted batch from its logged offsets after a restart: with an idempotent
sink every record reaches it once, whatever was killed when.  An offset the tracker cannot serve
(blocks already committed or allocated elsewhere, a tracker that lost its log) fails the query
with a message that says which, instead of skipping or repeating records.

The reader runs in a Python worker beside Spark's driver (its state lives there, not in the
session's process); ``read`` runs in executors on a pickled copy, so the tracker connection is
opened lazily and never pickled.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from sluice.clock import Clock
from sluice.config import ConfigError, read_token
from sluice.errors import SluiceError
from sluice.records import as_bytes
from sluice.spark_driver.batch import kafka_schema, record_to_row
from sluice.spark_driver.block_rdd import BlockRef, block_refs, read_block_records
from sluice.spark_driver.block_stores import delete_blocks, store_options
from sluice.spark_driver.receiver_source import close_client
from sluice.spark_driver.structured.batch_timer import BatchTimer
from sluice.spark_driver.structured.limits import batch_records, default_max_rows
from sluice.spark_driver.structured.options import OptionError, SluiceOptions, sluice_options
from sluice.storage.dead_letters import BadRecordHandling
from sluice.tracker.client.sync_client import SyncTrackerClient


class OffsetError(SluiceError, RuntimeError):
    """An offset the tracker cannot serve as it stands; the message says why and what to do."""


def value_schema() -> str:
    return "value binary"


def connect(options: SluiceOptions) -> Any:
    """A started ``SyncTrackerClient`` with the driver role, the auth token and TLS the options name."""

    try:
        token = read_token(options.auth_token_file or "")
    except ConfigError as exc:
        raise OptionError(f"option authTokenFile: {exc}") from None
    context = None
    if options.tls:
        try:
            context = ssl.create_default_context(cafile=options.tls_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise OptionError(f"option tlsCaFile = {options.tls_ca_file!r} cannot be loaded: {exc}") from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if options.tls_cert_file and options.tls_key_file:
            try:
                context.load_cert_chain(options.tls_cert_file, options.tls_key_file)
            except (OSError, ssl.SSLError) as exc:
                raise OptionError(
                    f"options tlsCertFile = {options.tls_cert_file!r} / tlsKeyFile = "
                    f"{options.tls_key_file!r} cannot be loaded: {exc}"
                ) from None
    client = SyncTrackerClient(
        options.tracker,
        "driver",
        auth_token=token,
        ssl=context,
        request_timeout=options.request_timeout_s,
        connect_timeout=options.request_timeout_s,
    )
    client.start()
    return client


@dataclass(frozen=True)
class BlockPartition(InputPartition):
    """One block to read: what :func:`read_block_records` needs, and the store's task options."""

    ref: BlockRef
    store_options: dict[str, Any]
    bad_records: BadRecordHandling | None = None  # the badRecords option; None: fail


def rows(partition: BlockPartition, records: str, include_headers: bool = False) -> Iterator[tuple]:
    """Task side: the block's records (CRC-checked, trimmed) as rows of the source's schema."""
    found = read_block_records(partition.ref, partition.store_options or None, bad_records=partition.bad_records)
    if records == "kafka":
        return (record_to_row(r, include_headers) for r in found)
    return ((as_bytes(getattr(r, "value", r)),) for r in found)


def _stream_offsets(offset: dict, streams: tuple[int, ...], what: str) -> dict[int, int]:
    """``{"0": 12}`` as ``{0: 12}`` for the query's streams; an offset of other streams is refused."""
    try:
        found = {int(s): int(seq) for s, seq in offset.items()}
    except (TypeError, ValueError):
        raise OffsetError(f"{what} offset {offset!r} is not a sluice offset ({{stream id: block number}})") from None
    missing = [s for s in streams if s not in found]
    if missing:
        raise OffsetError(
            f"{what} offset {offset!r} has no position for stream(s) {missing}: the checkpoint "
            "belongs to a query over other streams; use a new checkpointLocation"
        )
    return found


class SluiceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The ``sluice`` source's reader (see the module doc)."""

    def __init__(self, options: SluiceOptions, clock: Clock | None = None) -> None:
        self.options = options
        self._client: Any = None
        self._target: dict[int, int] | None = None  # Trigger.AvailableNow: the next numbers at its start
        self._timer = BatchTimer(options.limits.trigger_interval_ms, clock)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def _tracker(self) -> Any:
        if self._client is None:
            self._client = connect(self.options)
        return self._client

    def initialOffset(self) -> dict:
        """Each stream's oldest queued block: a new query reads what the tracker still holds."""
        client = self._tracker()
        return {str(s): client.list_blocks(s, 0, 0).first_seq for s in self.options.streams}

    def getDefaultReadLimit(self) -> ReadLimit:
        rows = default_max_rows(self.options.limits)
        return ReadAllAvailable() if rows is None else ReadMaxRows(rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self._timer.available_now()
        client = self._tracker()
        self._target = {s: client.list_blocks(s, 0, 0).next_seq for s in self.options.streams}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        overrun = self._timer.overrun_bound()  # first: the time since the last batch was planned
        client = self._tracker()
        begin = _stream_offsets(start, self.options.streams, "start")
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        rates = (client.status(leader=True).get("rates") or {}) if self.options.limits.admission and max_rows else {}
        end = {}
        for s in self.options.streams:
            bound = batch_records(self.options.limits, max_rows, rates.get(s), len(self.options.streams), overrun)
            until = None if self._target is None else self._target[s]
            if bound is None:  # everything queued: the numbers alone say where it ends
                queued = client.list_blocks(s, begin[s], begin[s])
                self._check_start(s, begin[s], queued.first_seq, queued.next_seq)
                end[str(s)] = max(begin[s], queued.next_seq if until is None else min(until, queued.next_seq))
                continue
            queued = client.list_blocks(s, begin[s], until, bound)
            self._check_start(s, begin[s], queued.first_seq, queued.next_seq)
            end[str(s)] = queued.blocks[-1][0] + 1 if queued.blocks else begin[s]
        return end

    def _check_start(self, stream: int, start: int, first_seq: int, next_seq: int) -> None:
        if start > next_seq:
            raise OffsetError(
                f"stream {stream}: the query's offset {start} is past every block the tracker at "
                f"{self.options.tracker} ever numbered ({next_seq}): the tracker lost its log or is "
                "another tracker; restore its wal_dir or start the query on a new checkpointLocation"
            )
        if start < first_seq:
            raise OffsetError(
                f"stream {stream}: blocks {start} to {first_seq - 1} are no longer queued at the "
                f"tracker {self.options.tracker} (committed by another query, or allocated by a "
                "sluice-driver on the same stream): one consumer per stream"
            )

    def reportLatestOffset(self) -> dict:
        client = self._tracker()
        return {str(s): client.list_blocks(s, 0, 0).next_seq for s in self.options.streams}

    def partitions(self, start: dict, end: dict) -> list[BlockPartition]:
        client = self._tracker()
        begin = _stream_offsets(start, self.options.streams, "start")
        until = _stream_offsets(end, self.options.streams, "end")
        parts: list[BlockPartition] = []
        records = 0
        for s in self.options.streams:
            if until[s] <= begin[s]:
                continue
            queued = client.list_blocks(s, begin[s], until[s])
            seqs = [seq for seq, _ in queued.blocks]
            if seqs != list(range(begin[s], until[s])):
                self._check_start(s, begin[s], queued.first_seq, queued.next_seq)
                raise OffsetError(
                    f"stream {s}: the tracker holds {len(seqs)} of blocks {begin[s]} to "
                    f"{until[s] - 1}; the others are gone (one consumer per stream)"
                )
            blocks = [b for _, b in queued.blocks]
            records += sum(b.num_records for b in blocks)
            refs = block_refs(blocks, self.options.block_store)
            bad = self.options.bad_records
            parts.extend(BlockPartition(ref, self._store_options(ref[0] or ref[1]), bad) for ref in refs)
        self._timer.planned(records)
        return parts

    def _store_options(self, url: str) -> dict[str, Any]:
        return store_options(url, self.options.block_store_options)

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, BlockPartition)
        return rows(partition, self.options.records, self.options.include_headers)

    def commit(self, end: dict) -> None:
        """The query is done with the blocks before ``end``: we delete them, then the tracker drops them.

        In that order so that a process killed in between leaves no orphan: a file the tracker no
        longer knows would never be deleted, while a block the tracker still queues without its file
        is dropped by the next commit and never read (Spark does not re-read a committed batch).
        A store that failed a delete leaves the blocks queued, so the next commit tries again.
        Blocks are numbered as they are queued, so those below ``until`` are the ones listed here.
        """
        client = self._tracker()
        for s, until in _stream_offsets(end, self.options.streams, "committed").items():
            if s not in self.options.streams:
                continue
            done = [info for _, info in client.list_blocks(s, 0, until).blocks]
            if delete_blocks(done, self.options.block_store, self._store_options):
                client.commit_blocks(s, until)

    def stop(self) -> None:
        client, self._client = self._client, None
        close_client(client)


class SluiceDataSource(DataSource):
    """``format("sluice")``: options in :func:`~sluice.spark_driver.structured.options.sluice_options`."""

    @classmethod
    def name(cls) -> str:
        return "sluice"

    def schema(self) -> Any:
        options = sluice_options(self.options)
        return kafka_schema(options.include_headers) if options.records == "kafka" else value_schema()

    def streamReader(self, schema: Any) -> SluiceStreamReader:
        return SluiceStreamReader(sluice_options(self.options))
