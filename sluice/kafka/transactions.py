"""``read_committed`` on fetched record batches: the batches of aborted transactions left out.

A fetch under ``isolation_level = read_committed`` returns the log up to the last stable offset,
aborted transactions included: the broker does not filter them, it lists them.  Each partition of
the response carries ``aborted_transactions``, pairs of (producer id, first offset) of the
transactions aborted in the fetched range, and the log holds a control batch, the marker, where
each transaction ended.  Kafka's consumer (``CompletedFetch`` in the Java client, aiokafka's
``PartitionRecords``) reads the batches in order and:

* before a batch of a producer, takes every listed transaction that starts at or before that
  batch's last offset into the set of aborted producers;
* leaves out a transactional batch whose producer is in that set;
* takes the producer out of the set at its ABORT marker (a control batch whose record's key is
  version 0, type 0), so its next transaction is read;
* never returns a control batch's record to the application.

:func:`committed` does the same on the bytes the broker sent, without sockets, so the readers on
Sluice's own fetches (:mod:`sluice.kafka.fetcher`) decode what a Java consumer would return.  Control
batches stay in what it returns: they decode to no record, and their offsets still move a
reader's position past the marker.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from sluice.kafka.batch_decode import read_varint
from sluice.kafka.batch_errors import BatchFormatError
from sluice.kafka.record_batches import scan_batches

_ATTRIBUTES = struct.Struct(">h")  # at byte 21 of a v2 batch
_PRODUCER_ID = struct.Struct(">q")  # at byte 43
_MAGIC = 16
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_V2_HEADER = 61
_ABORT = (0, 0)  # a control record's key: version, type (0: ABORT, 1: COMMIT)
_CONTROL_KEY = struct.Struct(">hh")

AbortedTransaction = tuple[int, int]
"""(producer id, first offset), as a fetch response lists them."""


def committed(data: bytes | memoryview, aborted: Iterable[AbortedTransaction]) -> bytes | memoryview:
    """The whole batches of ``data`` (one partition's fetched bytes) without those of the
    ``aborted`` transactions; ``data`` itself when none is left out.  A truncated last batch is
    left out as :func:`~sluice.kafka.record_batches.scan_batches` leaves it out."""
    pending = sorted(aborted, key=lambda pair: pair[1])
    view = memoryview(data)
    producers: set[int] = set()
    kept: list[memoryview] = []
    left_out = False
    end = 0
    for span in scan_batches(view):
        end = span.end
        entry = view[span.start : span.end]
        if entry[_MAGIC] != 2:
            kept.append(entry)  # legacy formats have no transactions
            continue
        producer = _PRODUCER_ID.unpack_from(entry, 43)[0]
        attributes = _ATTRIBUTES.unpack_from(entry, 21)[0]
        if producer >= 0:
            while pending and pending[0][1] < span.next_offset:
                producers.add(pending.pop(0)[0])
            if attributes & _CONTROL and _is_abort(entry, span.base_offset):
                producers.discard(producer)  # an abort marker may come for a partition with nothing else
            elif attributes & _TRANSACTIONAL and producer in producers:
                left_out = True
                continue
        kept.append(entry)
    if not left_out:
        return data if end == len(data) else view[:end]
    return b"".join(kept)


def fetched_until(data: bytes | memoryview) -> int | None:
    """One past the last offset of ``data``'s whole batches: where the next fetch starts once they
    are read, whatever of them was left out; None when it holds no whole batch."""
    until = None
    for span in scan_batches(data):
        until = span.next_offset if until is None else max(until, span.next_offset)
    return until


def _is_abort(entry: memoryview, base_offset: int) -> bool:
    """Whether a control batch is an ABORT marker (its first record's key, version and type)."""
    try:
        _, p = read_varint(entry, _V2_HEADER)  # the record's length
        p += 1  # its attributes
        _, p = read_varint(entry, p)  # timestamp delta
        _, p = read_varint(entry, p)  # offset delta
        size, p = read_varint(entry, p)
        if size < _CONTROL_KEY.size or p + size > len(entry):
            raise IndexError
        return _CONTROL_KEY.unpack_from(entry, p) == _ABORT
    except (IndexError, BatchFormatError):
        raise BatchFormatError(
            f"the control batch at offset {base_offset} holds no control record: a marker has a "
            "version and a type as its key"
        ) from None
