"""One stored Kafka record batch into records, record by record, its headers under a budget.

A batch is checked as a whole first (its CRC, its codec's output under
:data:`MAX_INFLATED_BATCH`): a batch that fails there is one
:class:`~sluice.kafka.bad_records.BadRecord` covering its offsets, and the batches around it still
decode.  Its records are then parsed by aiokafka's C parser, the fast path, when the batch is at
most :data:`FAST_PATH_BYTES` and every record in it is sound; any other batch is parsed here
record by record, each v2 record being length-prefixed, so one that does not parse (a header count
past its bytes, lengths that disagree) becomes a ``BadRecord`` of its own and the next one is read
from where its length says.  Only a record whose own length cannot be read leaves the rest of its
batch unreadable; that rest is one ``BadRecord``.

Header keys: Kafka's protocol calls them strings, but brokers do not check them and the Java
client reads any bytes (replacing what is not UTF-8).  aiokafka refuses the whole batch, so the
parser here keeps such a key as the ``bytes`` it is, a ``str`` for every key that is UTF-8.

Headers cost memory out of all proportion to their bytes: an empty header takes 2 bytes in a batch
and a 64-byte tuple (plus a list slot) decoded.  A :class:`HeaderBudget` per block bounds them:
:data:`HEADER_FLOOR` headers plus one per :data:`HEADER_BYTES` bytes of its (inflated) records.  A
record whose headers would pass what is left is a ``BadRecord`` before one of its headers is
built, so a block of header floods decodes into at most 4 times its bytes of header tuples.  The
fast path builds a whole batch's headers before they can be counted, which is why it takes only
batches of at most :data:`FAST_PATH_BYTES` (at most 32 times that, for an instant); a batch over
the budget is parsed again here, record by record.
"""

from __future__ import annotations

import struct
from operator import attrgetter
from typing import Any, NamedTuple

from sluice.kafka.bad_records import BadRecord
from sluice.kafka.batch_errors import BatchFormatError, CodecUnavailable
from sluice.kafka.codecs import inflate
from sluice.records import Record

MAX_INFLATED_BATCH = 64 << 20
"""Bytes a compressed batch may inflate to on read.  Producers size a batch by its uncompressed
bytes (``batch.size``, 16 KiB by default) and brokers cap a batch at ``message.max.bytes`` (1 MiB
by default), so a batch past 64 MiB uncompressed is not one a producer made."""

HEADER_FLOOR = 1 << 16
"""Headers any block may decode, whatever its bytes."""
HEADER_BYTES = 16
"""Bytes of inflated records per header a block may decode beyond :data:`HEADER_FLOOR`: records
whose headers average fewer bytes than this are a flood, not a producer's metadata."""
FAST_PATH_BYTES = 1 << 20
"""The largest (inflated) batch aiokafka's parser reads whole; Kafka's default ``message.max.bytes``."""

_V2_HEADER = 61
_BATCH = struct.Struct(">qiibIhiqqqhii")  # the v2 batch header's fields, in order
_CODEC = 0x07
_LOG_APPEND_TIME = 0x08
_CONTROL = 0x20
_FIELDS = (attrgetter("key"), attrgetter("value"), attrgetter("offset"), attrgetter("timestamp"))
_HEADERS = attrgetter("headers")


class HeaderBudget:
    """Headers a block may still decode (see the module docstring); one per block read."""

    __slots__ = ("left", "limit")

    def __init__(self) -> None:
        self.left = self.limit = HEADER_FLOOR

    def grow(self, record_bytes: int) -> None:
        """A batch of ``record_bytes`` (inflated) is being decoded: its share joins the budget."""
        self.left += record_bytes // HEADER_BYTES
        self.limit += record_bytes // HEADER_BYTES

    def take(self, count: int) -> bool:
        """Spend ``count`` headers; False (nothing spent) when fewer are left."""
        if count > self.left:
            return False
        self.left -= count
        return True


class RecordFormatError(BatchFormatError):
    """A record of a sound batch that does not parse; the parser turns it into a BadRecord, the
    message saying why."""


def decode_entry(entry: memoryview, topic: str, partition: int, budget: HeaderBudget) -> tuple[list, list[BadRecord]]:
    """The records of one whole stored batch (any magic) and the records of it that cannot be
    decoded.  Raises only :class:`~sluice.kafka.batch_errors.CodecUnavailable` (the reader lacks
    a package: no record is at fault)."""
    # aiokafka loads when batches are decoded, not with the block format
    from aiokafka.record.util import calc_crc32c

    if entry[16] != 2:
        return _legacy(entry, topic, partition)
    (base, _, _, _, crc, attributes, last_delta, first_ts, max_ts, _, _, _, count) = _BATCH.unpack_from(entry)
    next_offset = base + last_delta + 1

    def whole(reason: str) -> tuple[list, list[BadRecord]]:
        return [], [BadRecord(topic, partition, base, next_offset, reason, bytes(entry), first_ts)]

    if calc_crc32c(bytes(entry[21:])) != crc:
        return whole(f"the record batch at offset {base} fails its CRC check")
    if attributes & _CONTROL:
        return [], []
    if not 0 <= count <= last_delta + 1:
        return whole(f"the record batch at offset {base} counts {count} records in {last_delta + 1} offsets")
    records: bytes
    if attributes & _CODEC:
        try:
            records = inflate(attributes & _CODEC, entry[_V2_HEADER:], base, MAX_INFLATED_BATCH)
        except CodecUnavailable:
            raise
        except BatchFormatError as exc:
            return whole(str(exc))
    else:
        records = bytes(entry[_V2_HEADER:])
    budget.grow(len(records))
    if len(records) <= FAST_PATH_BYTES:
        fast = _fast(entry, records, topic, partition, budget)
        if fast is not None:
            return fast, []
    fixed = max_ts if attributes & _LOG_APPEND_TIME else None
    return _parse(records, count, base, next_offset, first_ts, fixed, topic, partition, budget)


def _fast(entry: memoryview, records: bytes, topic: str, partition: int, budget: HeaderBudget) -> list | None:
    """The batch's records by aiokafka's parser; None when it refuses one of them or their headers
    pass the budget (then the batch is parsed record by record)."""
    # aiokafka loads when batches are decoded, not with the block format
    from aiokafka.record.memory_records import MemoryRecords

    header = bytearray(entry[:_V2_HEADER])
    header[8:12] = (_V2_HEADER - 12 + len(records)).to_bytes(4, "big")
    header[22] &= ~_CODEC & 0xFF  # uncompressed now (the CRC is not checked again: it was, above)
    try:
        batch = MemoryRecords(bytes(header) + records).next_batch()
        parsed = list(batch) if batch is not None else []
    except Exception:  # noqa: BLE001 - any refusal sends the batch to the parser that names the record
        return None
    headers = [tuple(h) for h in map(_HEADERS, parsed)]
    if not budget.take(sum(map(len, headers))):
        return None
    keys, values, offsets, timestamps = (list(map(field, parsed)) for field in _FIELDS)
    new, columns = tuple.__new__, zip(keys, values, offsets, timestamps, headers)
    return [new(Record, (k, v, topic, partition, o, t, h)) for k, v, o, t, h in columns]


def _legacy(entry: memoryview, topic: str, partition: int) -> tuple[list, list[BadRecord]]:
    """A magic 0 or 1 entry (no headers in those formats) by aiokafka's parser, as one bad record
    when it does not parse."""
    # aiokafka loads when batches are decoded, not with the block format
    from aiokafka.record.memory_records import MemoryRecords

    try:
        batch = MemoryRecords(bytes(entry)).next_batch()
        if batch is None or not batch.validate_crc():
            raise RecordFormatError("the message fails its CRC check or is truncated")
        return [Record(r.key, r.value, topic, partition, r.offset, r.timestamp) for r in batch], []
    except Exception as exc:  # noqa: BLE001 - a message that does not parse is a bad record, whatever aiokafka says
        offset = int.from_bytes(entry[:8], "big", signed=True)  # a legacy entry's offset: its last record's
        reason = f"the message at offset {offset} cannot be decoded: {exc}"
        return [], [BadRecord(topic, partition, offset, offset + 1, reason, bytes(entry))]


def _parse(
    data: bytes,
    count: int,
    base: int,
    next_offset: int,
    first_ts: int,
    fixed_ts: int | None,
    topic: str,
    partition: int,
    budget: HeaderBudget,
) -> tuple[list, list[BadRecord]]:
    """A v2 batch's ``count`` records from its (inflated) record bytes, record by record."""
    rows: list = []
    bad: list[BadRecord] = []
    over: list[bytes] = []  # the bytes of the records of a run past the header budget
    over_from = over_headers = 0
    pos, n, offset = 0, len(data), base - 1
    for i in range(count):
        try:
            length, at = read_varint(data, pos) if pos < n else (-1, pos)
        except IndexError:
            length, at = -1, pos
        if length < 0 or at + length > n:
            reason = f"record {i} of the batch at offset {base} has no readable length: the rest of the batch is lost"
            bad.append(BadRecord(topic, partition, offset + 1, next_offset, reason, data[pos:], first_ts))
            break
        end = at + length
        row = _record(data, pos, at, end, base, offset + 1, first_ts, fixed_ts, topic, partition, budget)
        if isinstance(row, _OverBudget):  # consecutive ones are one run: a flood is not a list of its records
            if not over:
                over_from = row.offset
            over.append(data[pos:end])
            over_headers += row.headers
        else:
            if over:
                bad.append(_run(topic, partition, over_from, offset + 1, over, over_headers, budget))
                over, over_headers = [], 0
            if isinstance(row, BadRecord):
                bad.append(row)
            else:
                rows.append(row)
        offset, pos = row.offset, end
    if over:
        bad.append(_run(topic, partition, over_from, offset + 1, over, over_headers, budget))
    return rows, bad


class _OverBudget(NamedTuple):
    """A record whose headers the budget refused (nothing of them built)."""

    offset: int
    headers: int


def _run(
    topic: str, partition: int, first: int, until: int, raws: list[bytes], headers: int, budget: HeaderBudget
) -> BadRecord:
    """Consecutive records of a batch whose headers pass the budget, as one BadRecord of their bytes."""
    reason = (
        f"{len(raws)} record(s) with {headers} headers past the block's budget of {budget.limit} headers "
        f"({HEADER_FLOOR} plus one per {HEADER_BYTES} bytes of records)"
    )
    return BadRecord(topic, partition, first, until, reason, b"".join(raws))


def _record(
    data: bytes,
    pos: int,
    at: int,
    end: int,
    base: int,
    expected: int,
    first_ts: int,
    fixed_ts: int | None,
    topic: str,
    partition: int,
    budget: HeaderBudget,
) -> Record | BadRecord | _OverBudget:
    """One record of ``data[at:end]`` (after its length, which starts at ``pos``), or what could be
    read of it."""
    offset, timestamp = expected, fixed_ts if fixed_ts is not None else first_ts
    key = value = None
    raw_headers: list[tuple[bytes, bytes | None]] | None = None
    try:
        p = at + 1  # attributes: one byte no record uses
        delta, p = read_varint(data, p)
        if fixed_ts is None:
            timestamp = first_ts + delta
        delta, p = read_varint(data, p)
        offset = base + delta
        key, p = _nullable(data, p, end, "key")
        value, p = _nullable(data, p, end, "value")
        count, p = read_varint(data, p)
        if count < 0 or count > (end - p) // 2:  # a header takes at least two bytes
            raise RecordFormatError(f"it counts {count} headers in the {max(end - p, 0)} bytes left of it")
        if not budget.take(count):
            return _OverBudget(offset, count)
        raw_headers = []
        for _ in range(count):
            size, p = read_varint(data, p)
            if size < 0 or p + size > end:
                raise RecordFormatError(f"a header key of {size} bytes where {end - p} are left")
            header_key = data[p : p + size]
            header_value, p = _nullable(data, p + size, end, "header value")
            raw_headers.append((header_key, header_value))
        if p != end:
            raise RecordFormatError(f"its fields take {p - at} bytes of the {end - at} its length declares")
    except (RecordFormatError, IndexError) as exc:
        reason = str(exc) if isinstance(exc, RecordFormatError) else "its fields run past the batch"
        raw = data[pos:end]
        parsed = tuple(raw_headers) if raw_headers is not None and len(raw_headers) else None
        return BadRecord(topic, partition, offset, offset + 1, reason, raw, timestamp, key, value, parsed)
    headers = tuple((_text(k), v) for k, v in raw_headers)
    return tuple.__new__(Record, (key, value, topic, partition, offset, timestamp, headers))


def _text(key: bytes) -> Any:
    """A header key as ``str`` when it is UTF-8, else the bytes it is."""
    try:
        return key.decode()
    except UnicodeDecodeError:
        return key


def _nullable(data: bytes, p: int, end: int, what: str) -> tuple[bytes | None, int]:
    size, p = read_varint(data, p)
    if size == -1:
        return None, p
    if size < -1 or p + size > end:
        raise RecordFormatError(f"a {what} of {size} bytes where {end - p} are left")
    return data[p : p + size], p + size


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's varint and varlong) at ``pos``: (value, the position after it)."""
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos + 1
        shift += 7
        if shift > 63:
            raise RecordFormatError("a varint longer than 10 bytes")
