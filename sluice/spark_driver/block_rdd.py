"""An RDD with one partition per stored block (Spark's ``BlockRDD``/``WriteAheadLogBackedBlockRDD``),
with a few consecutive blocks per partition (``driver.max_batch_partitions``), or with a large
block's records in several partitions (``driver.min_batch_partitions``).

Spark runs a receiver batch in one task per block, so a batch holds as many tasks as blocks and a
backlog a receiver read within one block interval (a restart, a burst, backpressure off) runs on one
core however many the cluster has; Spark's advice is ``repartition``, a shuffle.  Here a batch with
fewer blocks than ``min_batch_partitions`` (by default the Spark context's cores) has its large
blocks read in slices instead, each task taking a consecutive range of a block's records
(:func:`slice_plan`); no record moves between executors, a task reads its block and keeps its slice.

PySpark cannot define a new RDD class with custom partitions, so the block list itself is
parallelized with one element per partition and each task turns its element into records: it opens
the block store *inside the task* (a PySpark worker process), reads the block with its CRC check
and yields the records.  Errors (missing or corrupt block) fail the task with the store's message,
which names the block and the location, and so fail the batch.  The storage options a task needs
(an object store's endpoint and credentials) travel with the RDD, so an executor needs nothing but
Sluice installed.

Offset filtering: when the tracker trimmed a block because part of it overlapped an earlier block
(a receiver that restarted and re-read), it recorded narrower ``offset_ranges`` than the block's
own.  The task then keeps only Kafka records whose (topic, partition, offset) falls inside a
recorded range, so each source record is processed once.  Blocks whose recorded ranges equal their
own skip the per-record check.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Any

from sluice.block_columns import BlockColumns, RangeRow
from sluice.block_info import ReceivedBlockInfo
from sluice.stages import now_ms
from sluice.storage.block_store import LocationRefused, open_block_store, read_block
from sluice.storage.dead_letters import BadRecordHandling

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import RDD, SparkContext

# (store URL or None, location, recorded ranges as (topic, partition, from, until) rows, block id)
BlockRef = tuple[str | None, str, tuple[RangeRow, ...], str]
# A partition of a split block: the block, and the first and end position of its records it keeps
# (None: to the block's end).
SliceRef = tuple[BlockRef, int, int | None]

_IGNORE_BAD: Any = object()  # a slice after a block's first: its first slice handles the bad records

#: A block is split only into slices of at least this many records: a PySpark task costs tens of
#: milliseconds, which a smaller slice of light records would not repay.
MIN_SLICE_RECORDS = 5_000


def block_refs(blocks: Sequence[ReceivedBlockInfo], store_url: str | None = None) -> list[BlockRef]:
    """The picklable description of each block that a task needs to read it, read from the blocks'
    columns (an allocation's :class:`BlockColumns` as they are: no block object is built)."""
    columns = blocks if isinstance(blocks, BlockColumns) else BlockColumns(blocks)
    return list(zip(repeat(store_url), columns.locations, columns.range_rows(), columns.block_ids))


def block_rdd(
    sc: SparkContext,
    blocks: Sequence[ReceivedBlockInfo],
    store_url: str | None = None,
    options: Mapping[str, Any] | None = None,
    skip_refused: bool = False,
    max_partitions: int = 0,
    min_partitions: int = 1,
    bad_records: BadRecordHandling | None = None,
    task_started: Any = None,
) -> RDD:
    """One partition per block, in the given order; an empty RDD for no blocks.  ``options`` are the
    storage options each task opens the store with (pickled once per task, with the function).
    ``skip_refused``: a block the store refuses to read (not a regular file, too large, a symbolic
    link, outside the store) yields no records instead of failing its task.  ``max_partitions``
    (0: none): consecutive blocks share a partition so there are at most that many.  A PySpark task
    costs tens of milliseconds of scheduling and worker round trips where a JVM task costs one, so
    a batch of many small blocks spends most of its time in task overhead; grouped, the records'
    order is kept and a failed task re-reads its few blocks.  ``min_partitions``: a batch of fewer
    blocks has its large ones read in slices (:func:`slice_plan`), up to ``max_partitions`` if set.
    ``bad_records``: what a task does with Kafka records that cannot be decoded (``driver.bad_records``;
    None: fail).  ``task_started``: an accumulator of :class:`EarliestParam` each task adds its wall
    clock to as it starts reading (the batch's ``task_start`` stamp, :mod:`sluice.stages`)."""
    columns = blocks if isinstance(blocks, BlockColumns) else BlockColumns(blocks)
    refs = block_refs(columns, store_url)
    if not refs:
        return sc.emptyRDD()
    given = dict(options) if options else None
    target = min(min_partitions, max_partitions) if max_partitions > 0 else min_partitions
    sizes = columns.num_records
    plan = slice_plan(sizes, target)
    if plan is not None:  # a block's last slice runs to its end, whatever count its receiver reported
        sliced = [(refs[i], lo, hi if hi < sizes[i] else None) for i, lo, hi in plan]
        read_slice = partial(read_block_slice, options=given, skip_refused=skip_refused, bad_records=bad_records)
        return sc.parallelize(sliced, numSlices=len(sliced)).flatMap(_noting_start(read_slice, task_started))
    read = (
        partial(read_block_records, options=given, skip_refused=skip_refused, bad_records=bad_records)
        if options or skip_refused or bad_records
        else read_block_records
    )
    slices = min(len(refs), max_partitions) if max_partitions > 0 else len(refs)
    return sc.parallelize(refs, numSlices=slices).flatMap(_noting_start(read, task_started))


class EarliestParam:
    """A Spark ``AccumulatorParam`` that keeps the earliest wall-clock ms added (0: none yet): the
    first task's start, which the driver reads once the batch function has returned."""

    def zero(self, value: int) -> int:
        return 0

    def addInPlace(self, value1: int, value2: int) -> int:  # PySpark's name
        return min(value1, value2) if value1 and value2 else value1 or value2


def _noting_start(read: Any, started: Any) -> Any:
    """``read``, or with ``started`` (an :class:`EarliestParam` accumulator) told each task's start."""
    return read if started is None else partial(_read_noting_start, read=read, started=started)


def _read_noting_start(part: Any, read: Any, started: Any) -> Any:
    """Task side: note the wall clock (one accumulator add per block), then read the block."""
    started.add(now_ms())
    return read(part)


def slice_plan(
    sizes: Sequence[int], partitions: int, min_slice: int = MIN_SLICE_RECORDS
) -> list[tuple[int, int, int]] | None:
    """(block index, first position, end position) of each partition of a batch whose blocks hold
    ``sizes`` records, when it has fewer blocks than ``partitions`` and a block holds two slices of
    at least ``min_slice``: each block cut into as few equal slices as keep every slice within an
    even share of the batch; None when no block is cut (one partition per block)."""
    if len(sizes) >= partitions:
        return None
    share = max(min_slice, -(-sum(sizes) // partitions))
    plan: list[tuple[int, int, int]] = []
    for i, n in enumerate(sizes):
        k = max(1, min(n // min_slice, -(-n // share)))
        plan.extend((i, j * n // k, (j + 1) * n // k) for j in range(k))
    return plan if len(plan) > len(sizes) else None


def read_block_slice(
    part: SliceRef,
    options: Mapping[str, Any] | None = None,
    skip_refused: bool = False,
    bad_records: BadRecordHandling | None = None,
) -> Iterable[Any]:
    """Task side: a slice of one block's records (positions among the records inside its recorded
    ranges: every slice of the block filters alike, so the slices share the records out exactly).
    The block's bad records are handled by the task of its first slice only."""
    ref, lo, hi = part
    records = read_block_records(ref, options, skip_refused, bad_records if lo == 0 else _IGNORE_BAD)
    return records[lo:hi]


def _inside(record: Any, allowed: dict[tuple[str, int], list[tuple[int, int]]]) -> bool:
    offset = getattr(record, "offset", None)
    if offset is None:  # not a Kafka record: ranges do not apply
        return True
    spans = allowed.get((record.topic, record.partition))
    if not spans:
        return False
    return any(lo <= offset < hi for lo, hi in spans)


def read_block_records(
    ref: BlockRef,
    options: Mapping[str, Any] | None = None,
    skip_refused: bool = False,
    bad_records: BadRecordHandling | None = None,
) -> list[Any]:
    """Task side: read one block (CRC checked, its location contained) and return the records inside
    its recorded ranges, in the block's order; its Kafka records that cannot be decoded, inside
    those ranges too, go to ``bad_records`` (None: the task fails naming the first)."""

    url, location, ranges, block_id = ref
    try:
        if not location.endswith(f"/{block_id}.blk"):
            raise LocationRefused(f"block {block_id} location {location!r:.300} is refused: it names another block")
        block = open_block_store(url, options).read(location) if url else read_block(location, options)
    except LocationRefused:
        if skip_refused:
            logging.getLogger(__name__).error("block %s left out: its location %s is refused", block_id, location)
            return []
        raise
    recorded = {tuple(r) for r in ranges}
    own = {(r.topic, r.partition, r.from_offset, r.until_offset) for r in block.offset_ranges}
    if not ranges or recorded == own:
        if bad_records is not _IGNORE_BAD:
            (bad_records or BadRecordHandling()).handle(block.bad_records, block.stream_id, block_id, f"in {location}")
        return block.records
    allowed: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for topic, partition, lo, hi in ranges:
        allowed.setdefault((topic, partition), []).append((lo, hi))
    if bad_records is not _IGNORE_BAD:
        bad = [b for b in block.bad_records if _inside(b, allowed)]
        (bad_records or BadRecordHandling()).handle(bad, block.stream_id, block_id, f"in {location}")
    return [r for r in block.records if _inside(r, allowed)]
