"""An RDD with one partition per stored block (Spark's ``BlockRDD``/``WriteAheadLogBackedBlockRDD``),
or with a few consecutive blocks per partition (``driver.max_batch_partitions``).

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

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import RDD, SparkContext

# (store URL or None, location, recorded ranges as (topic, partition, from, until) rows, block id)
BlockRef = tuple[str | None, str, tuple[RangeRow, ...], str]


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
) -> RDD:
    """One partition per block, in the given order; an empty RDD for no blocks.  ``options`` are the
    storage options each task opens the store with (pickled once per task, with the function).
    ``skip_refused``: a block the store refuses to read (not a regular file, too large, a symbolic
    link, outside the store) yields no records instead of failing its task.  ``max_partitions``
    (0: none): consecutive blocks share a partition so there are at most that many.  A PySpark task
    costs tens of milliseconds of scheduling and worker round trips where a JVM task costs one, so
    a batch of many small blocks spends most of its time in task overhead; grouped, the records'
    order is kept and a failed task re-reads its few blocks."""
    refs = block_refs(blocks, store_url)
    if not refs:
        return sc.emptyRDD()
    read = (
        partial(read_block_records, options=dict(options) if options else None, skip_refused=skip_refused)
        if options or skip_refused
        else read_block_records
    )
    slices = min(len(refs), max_partitions) if max_partitions > 0 else len(refs)
    return sc.parallelize(refs, numSlices=slices).flatMap(read)


def _inside(record: Any, allowed: dict[tuple[str, int], list[tuple[int, int]]]) -> bool:
    offset = getattr(record, "offset", None)
    if offset is None:  # not a Kafka record: ranges do not apply
        return True
    spans = allowed.get((record.topic, record.partition))
    if not spans:
        return False
    return any(lo <= offset < hi for lo, hi in spans)


def read_block_records(
    ref: BlockRef, options: Mapping[str, Any] | None = None, skip_refused: bool = False
) -> Iterable[Any]:
    """Task side: read one block (CRC checked, its location contained) and yield the records inside
    its recorded ranges."""
    from sluice.storage.block_store import LocationRefused, open_block_store, read_block

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
    if not ranges:
        return block.records
    recorded = {tuple(r) for r in ranges}
    own = {(r.topic, r.partition, r.from_offset, r.until_offset) for r in block.offset_ranges}
    if recorded == own:
        return block.records
    allowed: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for topic, partition, lo, hi in ranges:
        allowed.setdefault((topic, partition), []).append((lo, hi))
    return [r for r in block.records if _inside(r, allowed)]
