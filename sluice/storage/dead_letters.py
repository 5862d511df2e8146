"""What a reader does with Kafka records that cannot be decoded: ``driver.bad_records``.

:class:`BadRecordHandling` travels with a batch's RDD into its tasks and is applied to the
:class:`~sluice.kafka.bad_records.BadRecord` list of each block (or direct-mode range) a task
reads, after its good records were decoded:

* ``fail`` raises :class:`~sluice.kafka.bad_records.BadRecordError` for the first one, naming its
  topic, partition and offset: the batch fails, a restart meets the same record;
* ``skip`` logs one line per block (how many, the first one's coordinates and reason) and counts
  them, so a flood of bad records is not a flood of log lines;
* ``dead-letter`` does the same and writes them first to ``driver.dead_letter``, a block store URL
  (any scheme ``driver.block_store`` takes), as one file per block:
  ``<dead_letter>/stream-<id>/<block id>.blk`` for a receiver block, ``<dead_letter>/stream-<id>/
  direct-<topic>-<partition>-<from>-<until>.blk`` for a direct-mode range.  The file is a Sluice
  block of kind ``values`` (readable with the store's ``read``) written by the store's own atomic
  write, one map per bad record: ``topic``, ``partition``, ``offset``, ``until_offset``,
  ``timestamp_ms``, ``reason``, ``raw`` (the record's bytes as stored, inside its uncompressed
  batch, or the rest of the batch when the records cannot be told apart), and ``key``, ``value``,
  ``headers`` (pairs of raw bytes) as far as they could be read, else nil.  A task that runs again
  writes the same file again, so a retried read keeps one copy.

The count reaches the driver's ``sluice_bad_records_total`` through ``counter``, a Spark
accumulator the driver reads when the batch completes (tasks run in executors, whose own counters
no one scrapes); a task that Spark re-runs counts again, so the figure is at least the records
left out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.block_info import OffsetRange
from sluice.kafka.bad_records import BadRecord, BadRecordError, BadRecordPolicy
from sluice.storage.block_store import Block, open_block_store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BadRecordHandling:
    """``driver.bad_records`` as a task applies it (picklable: it is shipped with the RDD).

    :param policy: ``fail``, ``skip`` or ``dead-letter``.
    :param dead_letter: the dead-letter store's URL (``dead-letter`` only).
    :param options: the dead-letter store's options (an object store's endpoint and credentials).
    :param counter: a Spark accumulator that counts the records left out, or None.
    """

    policy: BadRecordPolicy = BadRecordPolicy.FAIL
    dead_letter: str = ""
    options: Mapping[str, Any] | None = None
    counter: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", BadRecordPolicy(self.policy))

    def handle(self, bad: Sequence[BadRecord], stream_id: int, name: str, where: str) -> None:
        """Apply the policy to the bad records of one block or range ``name`` (``where``: how a
        message names it)."""
        if not bad:
            return
        if self.policy is BadRecordPolicy.FAIL:
            raise BadRecordError(bad[0], where)
        kept = ""
        if self.policy is BadRecordPolicy.DEAD_LETTER:
            kept = f", kept in {write_dead_letters(self.dead_letter, self.options, stream_id, name, bad)}"
        count = sum(b.num_offsets for b in bad)
        if self.counter is not None:
            self.counter.add(count)
        log.warning(
            "%s: %d Kafka record(s) that cannot be decoded left out (driver.bad_records = %s%s); the first, %s: %s",
            where,
            count,
            self.policy.value,
            kept,
            bad[0].where,
            bad[0].reason,
        )


def dead_letter_entry(bad: BadRecord) -> dict[str, Any]:
    """One bad record as the map its dead-letter file holds."""
    headers = [list(pair) for pair in bad.headers] if bad.headers is not None else None
    return {**bad._asdict(), "headers": headers}


def write_dead_letters(
    url: str, options: Mapping[str, Any] | None, stream_id: int, name: str, bad: Sequence[BadRecord]
) -> str:
    """Write ``bad`` as the dead-letter file ``name`` of ``stream_id`` under ``url``; its location."""

    ranges = tuple(OffsetRange(b.topic, b.partition, b.offset, b.until_offset) for b in bad)
    store = open_block_store(url, dict(options) if options else None)
    return store.write(Block(stream_id, name, [dead_letter_entry(b) for b in bad], ranges))
