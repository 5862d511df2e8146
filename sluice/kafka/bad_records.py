"""Kafka records that cannot be decoded, one by one, and the policy that says what becomes of them.

A broker checks a record batch's framing and CRC, not what every record holds: a record whose
header count runs past its bytes, or whose inner lengths disagree with its own, reaches the
consumer.  Such a record must not take the records around it down with it (their block, their
batch), so the decoder (:mod:`~sluice.kafka.record_batches`) reports each one as a
:class:`BadRecord` with its coordinates and its bytes, and the reader applies
``driver.bad_records``:

* ``fail``: the read fails with :class:`BadRecordError`, naming the topic, partition and offset
  (and saying which setting lets the stream go on);
* ``skip``: the record is left out, counted (``sluice_bad_records_total``) and logged once per
  block or range;
* ``dead-letter``: the record is left out and kept byte for byte in the dead-letter store
  (:mod:`~sluice.storage.dead_letters`).

A header key that is not UTF-8 does not make a record bad: Kafka's Java client reads it
(replacing what is not UTF-8), so Sluice keeps it, as ``bytes`` (see :mod:`sluice.records`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from sluice.errors import SluiceError


class BadRecordPolicy(StrEnum):
    """``driver.bad_records``: what a reader does with a record that cannot be decoded."""

    FAIL = "fail"
    SKIP = "skip"
    DEAD_LETTER = "dead-letter"


class BadRecord(NamedTuple):
    """A record, or a run of records, that could not be decoded, with what is known of it.

    ``offset`` to ``until_offset``: the offsets it covers (one record: ``offset + 1``; a batch whose
    CRC fails, or whose records cannot be told apart past some point, covers the rest of the batch).
    ``raw``: its bytes as stored: the record as its uncompressed batch holds it, its length first
    (records refused one after the other for their headers: theirs, in a row), or the whole batch,
    or the rest of it.  ``key``, ``value`` and ``headers`` (pairs of raw key and value bytes) are what could be
    read of it before it went wrong; None where that part was not reached.
    """

    topic: str
    partition: int
    offset: int
    until_offset: int
    reason: str
    raw: bytes
    timestamp_ms: int = -1
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[bytes, bytes | None], ...] | None = None

    @property
    def where(self) -> str:
        """``topic/partition offset N`` (or ``offsets N-M`` for a run of records)."""
        last = self.until_offset - 1
        span = f"offset {self.offset}" if last <= self.offset else f"offsets {self.offset}-{last}"
        return f"{self.topic}/{self.partition} {span}"

    @property
    def num_offsets(self) -> int:
        """Offsets it covers (at least one: a run's records are counted by their offsets)."""
        return max(1, self.until_offset - self.offset)


class BadRecordError(SluiceError, ValueError):
    """A Kafka record that cannot be decoded, under ``driver.bad_records = fail``; the message
    names its topic, partition and offset and what is wrong."""

    def __init__(self, bad: BadRecord, context: str = "") -> None:
        self.bad = bad
        where = f" ({context})" if context else ""
        super().__init__(
            f"Kafka record {bad.where} cannot be decoded{where}: {bad.reason}; "
            "set driver.bad_records to skip or dead-letter to go on without it"
        )
