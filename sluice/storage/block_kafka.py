"""The ``kafka`` kind of block: Kafka records in columns (see :mod:`sluice.storage.block_format`).

Encoding: :class:`KafkaPiece` holds one fetch's records already in the columns, so a block only
joins its pieces.  Decoding: every column's size is checked against the record count the header
declares, and the count against the bytes, before a list is built: a forged count costs nothing.
The value and key arrays hold only ``bin`` and ``nil`` (a nested map or array is refused when it
is met), so they cannot decode into many times their bytes; the headers column (format version
3) is read pair by pair under the same rule, each pair a text or bin key and a bin or nil value,
and under the same budget of headers as record batches (:mod:`~sluice.kafka.batch_decode`).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter
from typing import Any

import msgpack

from sluice.kafka.bad_records import BadRecord, BadRecordError
from sluice.kafka.batch_decode import HeaderBudget
from sluice.records import Record
from sluice.storage.format_errors import CorruptFormatError, FormatError

_SWAP = sys.byteorder != "little"
_COLUMNS = tuple(attrgetter(name) for name in ("key", "value", "topic", "partition", "offset"))
_PACKER = msgpack.Packer(use_bin_type=True)
_NIL = b"\xc0"
_NO_HEADERS = b"\x90"  # an empty msgpack array: a record's headers when it has none
_HEADERS = attrgetter("headers")


def is_kafka(records: list) -> bool:
    first = records[0] if records else None
    return first is not None and hasattr(first, "offset") and hasattr(first, "partition") and hasattr(first, "topic")


def _int_column(code: str, values: Any) -> bytes:
    column = array(code, values)
    if _SWAP:
        column.byteswap()
    return column.tobytes()


@dataclass(frozen=True, slots=True, eq=False)
class KafkaPiece:
    """Kafka records already in the block format's columns: one fetch of one partition, encoded
    as soon as ``getmany`` returned it.

    A receiver's buffer then holds these compact pieces (about a third of the memory of the
    ConsumerRecords they came from) instead of the records, and pushing a block only assembles its
    pieces' columns: the pieces' bytes are written as they are, with no copy of the values.
    """

    num_records: int
    topics: tuple[str, ...]  # the distinct topics, in the order topic_index refers to them
    topic_index: bytes  # int32 per record; empty when every record has topics[0]
    partition: int | None  # the partition of every record, or None when partition_column holds them
    partition_column: bytes
    offsets: bytes
    timestamps: bytes
    values: memoryview  # the msgpack items of the value array, without the array's header
    keys: memoryview | None  # the same for the keys; None when no record has a key
    headers: memoryview | None = None  # the same for the headers; None when no record has one
    oldest_timestamp_ms: int = -1  # the oldest record timestamp; -1: no record has one
    last_timestamp_ms: int = -1  # the last record's timestamp

    @property
    def nbytes(self) -> int:
        return (
            len(self.topic_index)
            + len(self.partition_column)
            + len(self.offsets)
            + len(self.timestamps)
            + self.values.nbytes
            + (self.keys.nbytes if self.keys is not None else 0)
            + (self.headers.nbytes if self.headers is not None else 0)
        )


def _array_items(items: list) -> memoryview:
    """``items`` as a msgpack array without its header, so pieces' arrays can be joined into one."""
    packed = msgpack.packb(items, use_bin_type=True)
    return memoryview(packed)[len(_PACKER.pack_array_header(len(items))) :]


def encode_kafka_piece(records: Sequence[Any], partition_of_all: tuple[str, int] | None = None) -> KafkaPiece:
    """Encode Kafka records (anything with ``key, value, topic, partition, offset, timestamp``) as a
    :class:`KafkaPiece`; raises FormatError naming what cannot be stored.

    ``partition_of_all``: the ``(topic, partition)`` of every record, when the caller knows it (one
    partition's entry of a ``getmany`` result), which spares two of the six passes over the records.
    """
    if not records:
        raise FormatError("a Kafka piece needs at least one record")
    timestamp = attrgetter("timestamp_ms" if type(records[0]) is Record else "timestamp")
    getters = (*_COLUMNS[:2], _COLUMNS[4], timestamp) if partition_of_all else (*_COLUMNS, timestamp)
    try:
        columns = [list(map(getter, records)) for getter in getters]
    except AttributeError as exc:
        raise FormatError(f"a Kafka block holds a record without Kafka fields: {exc}") from exc
    n = len(records)
    topic_names: tuple[str, ...]
    partition: int | None
    if partition_of_all:
        keys, values, offsets, timestamps = columns
        topic_names, topic_index = (partition_of_all[0],), b""
        partition, partition_column = partition_of_all[1], b""
    else:
        keys, values, topics, partitions, offsets, timestamps = columns
        topic_names, topic_index = _topic_columns(topics)
        partition, partition_column = _partition_columns(partitions)
    headers = list(map(_HEADERS, records)) if hasattr(records[0], "headers") else []
    try:  # one C call per column; bin for bytes, nil for None
        value_items = _array_items(values)
        key_items = _array_items(keys) if keys.count(None) != n else None
        header_items = _array_items(headers) if any(headers) else None
    except (TypeError, ValueError, OverflowError) as exc:
        raise FormatError(f"a Kafka record's key, value or headers cannot be stored: {exc}") from exc
    return KafkaPiece(
        n,
        topic_names,
        topic_index,
        partition,
        partition_column,
        _int_column("q", offsets),
        _int_column("q", timestamps),
        value_items,
        key_items,
        header_items,
        _oldest(timestamps),
        timestamps[-1],
    )


def _oldest(timestamps: list[int]) -> int:
    """The oldest timestamp, leaving out records without one (-1); -1 when none has one.  One pass
    in C in the usual case, every record with a timestamp."""
    oldest = min(timestamps)
    return oldest if oldest >= 0 else min((t for t in timestamps if t >= 0), default=-1)


def _topic_columns(topics: list[str]) -> tuple[tuple[str, ...], bytes]:
    """The distinct topics and an int32 index per record; no index when there is one topic."""
    if topics.count(topics[0]) == len(topics):  # the usual case, checked in C
        return (topics[0],), b""
    names: dict[str, int] = {}
    index = _int_column("i", [names.setdefault(t, len(names)) for t in topics])
    return tuple(names), index


def _partition_columns(partitions: list[int]) -> tuple[int | None, bytes]:
    """The one partition of every record, or None and an int32 partition per record."""
    if partitions.count(partitions[0]) == len(partitions):
        return partitions[0], b""
    return None, _int_column("i", partitions)


def _repeated(value: int, count: int) -> bytes:
    return _int_column("i", [value]) * count


def encode_pieces(pieces: Sequence[KafkaPiece]) -> tuple[dict[str, Any], list[Any]]:
    """The block's columns from its pieces: the small integer columns joined, the value and key
    items written as the pieces hold them behind one array header each."""
    n = sum(p.num_records for p in pieces)
    names: dict[str, int] = {}
    for piece in pieces:
        for topic in piece.topics:
            names.setdefault(topic, len(names))
    columns: dict[str, Any] = {"topics": list(names)}
    if len(names) == 1:
        topic_index = b""
    else:
        topic_index = b"".join(
            _repeated(names[p.topics[0]], p.num_records)
            if not p.topic_index
            else _int_column("i", [names[p.topics[i]] for i in _read_ints("i", p.topic_index)])
            for p in pieces
        )
    first = pieces[0].partition
    if first is not None and all(p.partition == first for p in pieces):
        columns["partition"], partition_column = first, b""
    else:
        partition_column = b"".join(
            p.partition_column if p.partition is None else _repeated(p.partition, p.num_records) for p in pieces
        )
    has_keys = any(p.keys is not None for p in pieces)
    columns["has_keys"] = has_keys
    values = [_PACKER.pack_array_header(n), *(p.values for p in pieces)]
    keys = (
        [_PACKER.pack_array_header(n), *(p.keys if p.keys is not None else _NIL * p.num_records for p in pieces)]
        if has_keys
        else []
    )
    headers = (
        [
            _PACKER.pack_array_header(n),
            *(p.headers if p.headers is not None else _NO_HEADERS * p.num_records for p in pieces),
        ]
        if any(p.headers is not None for p in pieces)
        else []
    )
    sections = [
        [b"".join(p.offsets for p in pieces)],
        [b"".join(p.timestamps for p in pieces)],
        [partition_column],
        [topic_index],
        values,
        keys,
        headers,
    ]
    columns["sections"] = [sum(map(len, s)) for s in sections]
    return columns, [part for section in sections for part in section if len(part)]


def _read_ints(code: str, data: bytes | memoryview) -> array:
    column = array(code)
    column.frombytes(data)
    if _SWAP:
        column.byteswap()
    return column


def _sections(
    header: dict[str, Any], payload: memoryview, n: int, widths: Sequence[tuple[int, ...]]
) -> list[memoryview]:
    """The payload cut into the column sections the header lists, each section's size checked
    against ``n`` records before anything is decoded: ``widths[i]`` are the sizes per record
    section ``i`` may have (0: may be omitted; ``()``: any size, a byte column)."""
    sizes = header["columns"]["sections"]
    if (
        not isinstance(sizes, list)
        or len(sizes) != len(widths)
        or not all(type(s) is int and s >= 0 for s in sizes)
        or sum(sizes) != len(payload)
    ):
        raise CorruptFormatError("column sizes do not add up to the payload")
    for i, (size, allowed) in enumerate(zip(sizes, widths)):
        if allowed and size not in [w * n for w in allowed]:
            raise CorruptFormatError(f"column {i} holds {size} bytes, not what {n} records take")
    cuts = [0, *accumulate(sizes)]
    return [payload[cuts[i] : cuts[i + 1]] for i in range(len(sizes))]


def _topic_names(columns: dict[str, Any]) -> list[str]:
    names = columns["topics"]
    if not isinstance(names, list) or not names or not all(isinstance(t, str) for t in names):
        raise CorruptFormatError("the header's topic list is not a list of names")
    return names


def _topics(names: list[str], index: memoryview, n: int) -> list[str]:
    if not index:
        return [names[0]] * n
    try:
        return [names[i] for i in _read_ints("i", index)]
    except IndexError:
        raise CorruptFormatError("a record's topic index is past the header's topic list") from None


def _split(lengths: array, data: bytes) -> list[bytes | None]:
    ends = list(accumulate(n if n > 0 else 0 for n in lengths))
    if (ends[-1] if ends else 0) != len(data):
        raise CorruptFormatError("the value or key lengths do not add up to their column")
    starts = [0, *ends[:-1]]
    return [None if n < 0 else data[s:e] for n, s, e in zip(lengths, starts, ends)]


def decode_kafka_v1(header: dict[str, Any], payload: memoryview, n: int) -> list[Record]:
    """Format version 1: values and keys as int32 lengths plus concatenated bytes."""
    columns = header["columns"]
    keyed = bool(columns["has_keys"])
    part = _sections(header, payload, n, ((8,), (8,), (4,), (0, 4), (4,), (0, 4) if keyed else (0,), (), ()))
    offsets, timestamps, partitions = _read_ints("q", part[0]), _read_ints("q", part[1]), _read_ints("i", part[2])
    topics = _topics(_topic_names(columns), part[3], n)
    values = _split(_read_ints("i", part[4]), bytes(part[6]))
    keys = _split(_read_ints("i", part[5]), bytes(part[7])) if keyed else [None] * n
    return _rows(n, keys, values, topics, partitions, offsets, timestamps, [()] * n)


def decode_kafka(
    header: dict[str, Any], payload: memoryview, n: int, version: int, bad: list[BadRecord] | None = None
) -> list[Record]:
    """Format versions 2 and 3: values and keys as msgpack arrays of bin/nil; version 3 adds the
    headers column, its headers under a :class:`~sluice.kafka.batch_decode.HeaderBudget` (a
    record past it is appended to ``bad``, or raises BadRecordError without it)."""
    columns = header["columns"]
    keyed = bool(columns["has_keys"])
    widths: tuple[tuple[int, ...], ...] = ((8,), (8,), (0, 4), (0, 4), (), ())
    part = _sections(header, payload, n, widths + ((),) if version >= 3 else widths)
    if not keyed and len(part[5]):
        raise CorruptFormatError("a key column in a block without keys")
    offsets, timestamps = _read_ints("q", part[0]), _read_ints("q", part[1])
    if part[2]:
        partitions: Any = _read_ints("i", part[2])
    elif type(columns["partition"]) is int:
        partitions = [columns["partition"]] * n
    else:
        raise CorruptFormatError("the header's partition is not an integer")
    topics = _topics(_topic_names(columns), part[3], n)
    values = _flat_array(part[4], n, "value")
    keys = _flat_array(part[5], n, "key") if keyed else [None] * n
    over: dict[int, bytes] = {}
    if version >= 3 and part[6]:
        budget = HeaderBudget()
        budget.grow(len(payload))
        headers, over = _headers(part[6], n, budget)
    else:
        headers = [()] * n
    rows = _rows(n, keys, values, topics, partitions, offsets, timestamps, headers)
    if not over:
        return rows
    for i, raw in over.items():
        r = rows[i]
        reason = f"its headers pass the block's budget of {budget.limit} headers"
        item = BadRecord(r.topic, r.partition, r.offset, r.offset + 1, reason, raw, r.timestamp_ms, r.key, r.value)
        if bad is None:
            raise BadRecordError(item)
        bad.append(item)
    return [r for i, r in enumerate(rows) if i not in over]


def _headers(data: memoryview, n: int, budget: HeaderBudget) -> tuple[list, dict[int, bytes]]:
    """The headers column: per record a tuple of ``(key, value)`` pairs, a text or bin key (a key
    that is not UTF-8, see :mod:`sluice.records`) and a bin or nil value, read item by item so
    that no other shape is ever built.  A record whose headers pass ``budget`` gets None, and its
    headers' bytes are returned by its position, none of them built."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1), use_list=False)
    unpacker.feed(data)
    wrong = CorruptFormatError(f"the headers column is not an array of {n} lists of [text or bin, bin or nil] pairs")
    over: dict[int, bytes] = {}
    try:
        if unpacker.read_array_header() != n:
            raise wrong
        found: list = []
        for i in range(n):
            start = unpacker.tell()
            count = unpacker.read_array_header()
            if not budget.take(count):
                for _ in range(count):
                    unpacker.skip()
                over[i] = bytes(data[start : unpacker.tell()])
                found.append(None)
                continue
            pairs = []
            for _ in range(count):
                if unpacker.read_array_header() != 2:
                    raise wrong
                key, value = unpacker.unpack(), unpacker.unpack()
                if type(key) not in (str, bytes) or not (value is None or type(value) is bytes):
                    raise wrong
                pairs.append((key, value))
            found.append(tuple(pairs))
        if unpacker.tell() != len(data):
            raise wrong
    except (msgpack.OutOfData, msgpack.StackError, ValueError) as exc:
        raise wrong from exc
    return found, over


def _flat_array(data: memoryview, n: int, what: str) -> list:
    """A msgpack array of ``n`` items, none of them a map or an array: one nested container is
    refused as soon as it is built, so the column never decodes into many times its bytes."""

    def refuse(_: Any) -> Any:
        raise CorruptFormatError(f"the {what} column is not one flat array of {n} bin or nil items")

    seen: list[bool] = []

    def outer(items: list) -> list:  # inner arrays complete first: the first call is the outer one
        if seen or len(items) != n:
            refuse(items)
        seen.append(True)
        return items

    values = msgpack.unpackb(
        data, raw=False, list_hook=outer, object_hook=refuse, ext_hook=lambda code, _: refuse(code), max_array_len=n
    )
    if not isinstance(values, list):
        raise CorruptFormatError(f"the {what} column is not an array")
    return values


def _rows(
    n: int, keys: list, values: list, topics: list, partitions: Any, offsets: Any, timestamps: Any, headers: list
) -> list[Record]:
    columns = (keys, values, topics, partitions, offsets, timestamps, headers)
    if any(len(column) != n for column in columns):
        raise CorruptFormatError(f"columns do not all hold the header's {n} records")
    new = tuple.__new__
    return [new(Record, row) for row in zip(*columns)]
