"""Kafka record batches stored as the broker sent them: cut into pieces on the receiver without
building a record, decoded into records on the reader.

Building one ``ConsumerRecord`` per record and then encoding each record's fields into the block
format's columns cost the receiver more interpreter time than fetching did: a receiver that shares
its interpreter with its fetch loop ran at about 0.7 of a bare ``getmany`` loop.  A fetch
response already holds the records in a compact, checksummed, possibly compressed form (Kafka's
record batches), so the receiver reads only each batch's fixed header (offsets, record count,
flags), cuts the fetched bytes into pieces at batch boundaries and stores them as they are; the
reader checks each batch's CRC there, end to end, and decodes it record by record
(:mod:`~sluice.kafka.batch_decode`): a record that cannot be decoded is reported by its
coordinates (:mod:`~sluice.kafka.bad_records`), the others are read.

Layout of a v2 record batch header (big-endian), the fields this module reads::

    0  baseOffset int64      8  batchLength int32    16 magic int8    21 attributes int16
    23 lastOffsetDelta int32 27 baseTimestamp int64  35 maxTimestamp int64
    57 recordsCount int32   (61 bytes in all)

The two timestamps give each piece its oldest and last record's Kafka timestamp without decoding a
record (under LogAppendTime, attribute bit 3, every record of a batch has ``maxTimestamp``); legacy
entries give none (-1).

Entries of the legacy message formats (magic 0 and 1) have the same first 12 bytes and the magic
at byte 16 too, but no record count: their offsets are learnt by decoding them, as are those of a
batch that starts before the fetch position or must be split across pieces (rare: a restart in
the middle of a batch, or a batch larger than a block interval's worth at a low rate).  Those
decodes cost what the record path costs; a steady stream of current-format batches pays none.

No declared size is trusted: a batch's length must fit the bytes, its record count must fit its
offset span (and, uncompressed, its bytes: a record takes at least 7), and the reader inflates a
compressed batch itself (:mod:`~sluice.kafka.codecs`: gzip, snappy, lz4, zstd), stopping
past :data:`~sluice.kafka.batch_decode.MAX_INFLATED_BATCH` bytes, before a record is parsed (aiokafka would inflate it
whole).  A receiver also refuses a batch that claims offsets past the partition's high watermark.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from sluice.kafka.bad_records import BadRecord, BadRecordError
from sluice.kafka.batch_decode import HeaderBudget, decode_entry
from sluice.kafka.batch_errors import BatchFormatError as BatchFormatError
from sluice.kafka.batch_errors import CodecUnavailable as CodecUnavailable
from sluice.records import Record

_LOG_ENTRY = struct.Struct(">qi")  # offset, size: the first 12 bytes of every format
_V2_FIELDS = struct.Struct(">bIhi")  # magic, crc, attributes, lastOffsetDelta, from byte 16
_COUNT = struct.Struct(">i")
_TIMESTAMPS = struct.Struct(">qq")  # baseTimestamp, maxTimestamp, from byte 27
_LOG_APPEND_TIME = 0x08
_V2_HEADER = 61
_LEGACY_MIN = 26  # offset, size, crc, magic, attributes, key length, value length (magic 0)
_CONTROL = 0x20
_CODEC = 0x07
_MIN_RECORD = 7  # length, attributes, timestamp and offset deltas, key and value lengths, headers count


class BatchSpan(NamedTuple):
    """One complete record batch in a fetched buffer."""

    start: int  # byte positions in the buffer
    end: int
    base_offset: int
    next_offset: int  # one past its last offset (kept by v2 even when compaction removed the record)
    num_records: int  # records a reader gets from it (0 for a control batch)
    first_timestamp: int = -1  # its first record's Kafka timestamp (ms); -1: none (legacy formats)
    max_timestamp: int = -1  # its newest record's


@dataclass(frozen=True, slots=True, eq=False)
class KafkaBatches:
    """Record batches of one partition as fetched, standing for the records in ``[from_offset,
    until_offset)``: what the receiver buffers and a block stores, decoded only by the reader."""

    topic: str
    partition: int
    data: memoryview  # whole batches; the first may start before from_offset, the reader skips those
    from_offset: int
    until_offset: int
    num_records: int
    oldest_timestamp_ms: int = -1  # the oldest first timestamp of its batches; -1: none known
    last_timestamp_ms: int = -1  # at most the timestamp of the record after its last (see batch_pieces)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes


def scan_batches(data: bytes | memoryview) -> Iterator[BatchSpan]:
    """The complete record batches of a fetched buffer, in order; a truncated last one (a broker
    may cut the response at its byte limit) is left out.  Raises BatchFormatError on bytes that
    cannot be batches."""
    pos, n = 0, len(data)
    while pos + 17 <= n:
        base, size = _LOG_ENTRY.unpack_from(data, pos)
        end = pos + 12 + size
        magic = data[pos + 16]
        if magic == 2:
            if size < _V2_HEADER - 12:
                raise BatchFormatError(
                    f"record batch at byte {pos} (offset {base}) declares {size} bytes, "
                    f"fewer than the {_V2_HEADER - 12} of its header"
                )
            if end > n:
                return
            _, _, attributes, last_delta = _V2_FIELDS.unpack_from(data, pos + 16)
            count = 0 if attributes & _CONTROL else _COUNT.unpack_from(data, pos + 57)[0]
            if last_delta < 0 or count < 0:
                raise BatchFormatError(
                    f"record batch at byte {pos} (offset {base}) has a negative "
                    f"{'last offset delta' if last_delta < 0 else 'record count'}"
                )
            room = (size + 12 - _V2_HEADER) // _MIN_RECORD if not attributes & _CODEC else count
            if count > min(last_delta + 1, room):
                raise BatchFormatError(
                    f"record batch at byte {pos} (offset {base}) counts {count} records, more than "
                    f"its {last_delta + 1} offsets{'' if attributes & _CODEC else f' or {size} bytes'} hold"
                )
            first, newest = _TIMESTAMPS.unpack_from(data, pos + 27)
            if attributes & _LOG_APPEND_TIME:
                first = newest
            yield BatchSpan(pos, end, base, base + last_delta + 1, count, first, newest)
        elif magic in (0, 1):
            if size < _LEGACY_MIN - 12:
                raise BatchFormatError(f"message at byte {pos} (offset {base}) declares {size} bytes, too few")
            if end > n:
                return
            offsets = record_offsets(data[pos:end])
            # a legacy entry's offset is its last record's (its only one, or a compressed set's last)
            yield BatchSpan(pos, end, offsets[0] if offsets else base, base + 1, len(offsets))
        else:
            raise BatchFormatError(f"record batch at byte {pos} has magic {magic}: Kafka knows 0, 1 and 2")
        pos = end


def record_offsets(batch: bytes | memoryview) -> list[int]:
    """The offsets of the records a reader gets from ``batch`` (whole batches), in order: those
    it decodes and the first of each one it cannot (see :func:`decode_batches`)."""

    view, offsets = memoryview(batch), []
    for start, end in _entries(view):
        rows, wrong = decode_entry(view[start:end], "", 0, HeaderBudget())
        offsets += sorted([r.offset for r in rows] + [w.offset for w in wrong])
    return offsets


def batch_pieces(
    topic: str,
    partition: int,
    data: bytes | memoryview,
    position: int,
    size: Callable[[], int],
    highwater: int | None = None,
) -> Iterator[KafkaBatches]:
    """Cut one partition's fetched batches into pieces of at most ``size()`` records from
    ``position`` (the fetch offset) on, whole batches where they fit.

    ``size`` is asked again for each piece (a rate that changed while a piece waited for its
    permits applies to the next).  Pieces follow each other without a gap: each starts where the
    one before ended, so the last one's ``until_offset`` is where the next fetch starts.  A piece
    of control batches only holds no record (``num_records`` 0) but still moves that position.
    A batch reaching past ``highwater`` (the partition's, from the same fetch) is refused: its
    offsets would move the committed position past records that do not exist yet.

    Each piece carries the oldest first timestamp of its batches and, as its last timestamp, the
    newest timestamp of its last batch, or that batch's first when the piece ends inside it: with
    timestamps rising along the partition, the record after the piece is no older than that.
    """
    view = memoryview(data)
    start = end = None
    since, count, limit = position, 0, size()
    oldest = last = -1
    for span in scan_batches(view):
        if highwater is not None and span.next_offset > highwater:
            raise BatchFormatError(
                f"record batch at offset {span.base_offset} claims offsets up to {span.next_offset - 1}, "
                f"past the partition's high watermark {highwater}"
            )
        if span.next_offset <= position:
            continue  # a batch the broker sent whole although the fetch starts after it
        offsets = None
        if span.base_offset < position:
            offsets = [o for o in record_offsets(view[span.start : span.end]) if o >= position]
        inside = span.num_records if offsets is None else len(offsets)
        if start is not None and count + inside > limit:
            yield KafkaBatches(topic, partition, view[start:end], since, position, count, oldest, last)
            start, since, count, limit, oldest = None, position, 0, size(), -1
        if inside > limit:  # one batch over several pieces, each reading its own offsets of it
            if offsets is None:
                offsets = record_offsets(view[span.start : span.end])
            taken = 0
            while taken < inside:
                chunk = offsets[taken : taken + limit]
                taken += len(chunk)
                until = offsets[taken] if taken < inside else span.next_offset
                last = span.max_timestamp if taken >= inside else span.first_timestamp
                batch = view[span.start : span.end]
                yield KafkaBatches(topic, partition, batch, since, until, len(chunk), span.first_timestamp, last)
                since, limit = until, size()
            position = span.next_offset
            continue
        if start is None:
            start = span.start
        end, count, position = span.end, count + inside, span.next_offset
        if span.first_timestamp >= 0 and (oldest < 0 or span.first_timestamp < oldest):
            oldest = span.first_timestamp
        last = span.max_timestamp
    if start is not None:
        yield KafkaBatches(topic, partition, view[start:end], since, position, count, oldest, last)


def decode_batches(
    piece_data: bytes | memoryview,
    topic: str,
    partition: int,
    from_offset: int,
    until_offset: int,
    bad: list[BadRecord] | None = None,
    budget: HeaderBudget | None = None,
) -> list[Record]:
    """The records of ``[from_offset, until_offset)`` in stored batches, each batch's CRC checked,
    decoded record by record (:mod:`~sluice.kafka.batch_decode`).

    A record of the range that cannot be decoded is appended to ``bad``; without ``bad`` it raises
    :class:`~sluice.kafka.bad_records.BadRecordError` naming it (``driver.bad_records = fail``).
    ``budget``: the headers the block may still decode (a new one for this piece when not given).
    Raises BatchFormatError when the bytes are not whole batches (the block, not a record, is
    damaged) and CodecUnavailable when a codec's package is missing here.
    """

    budget = budget if budget is not None else HeaderBudget()
    records: list[Record] = []
    view = memoryview(piece_data)
    for start, end in _entries(view):
        rows, wrong = decode_entry(view[start:end], topic, partition, budget)
        if rows and (rows[0].offset < from_offset or rows[-1].offset >= until_offset):
            rows = [r for r in rows if from_offset <= r.offset < until_offset]
        for item in wrong:
            if item.until_offset > from_offset and item.offset < until_offset:
                if bad is None:
                    raise BadRecordError(item)
                bad.append(item)
        records += rows
    return records


def _entries(view: memoryview) -> Iterator[tuple[int, int]]:
    """Where each whole entry (batch or legacy message) of stored batches starts and ends, by their
    lengths alone; BatchFormatError when the bytes do not end with a whole one."""
    pos, n = 0, len(view)
    while pos < n:
        if pos + 17 > n:
            raise BatchFormatError(f"{n} bytes of record batches end {n - pos} bytes into a batch that is not whole")
        base, size = _LOG_ENTRY.unpack_from(view, pos)
        end = pos + 12 + size
        magic = view[pos + 16]
        least = _V2_HEADER if magic == 2 else _LEGACY_MIN
        if magic not in (0, 1, 2) or end < pos + least or end > n:
            raise BatchFormatError(
                f"record batch at byte {pos} (offset {base}): magic {magic}, {size} bytes, where "
                f"{n - pos - 12} are left: the batch is not whole"
            )
        yield pos, end
        pos = end
