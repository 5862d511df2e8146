"""The on-disk form of one block: a fixed preamble, a msgpack header, the records, all CRC'd.

Layout (preamble big-endian)::

    magic  b"SLUICEBK"                      8 bytes
    format version                          uint16
    header length H                         uint32
    payload length P                        uint64
    CRC32 of header + payload               uint32
    header  (msgpack map, H bytes): stream_id, block_id, num_records, offset_ranges, kind, ...
    payload (P bytes): the records

The header repeats what the tracker knows (stream, block id, record count, offset ranges) so a
block file is self-describing and a reader can tell a misplaced or truncated file from a good one.

Three payload kinds:

* ``"kafka"``: Kafka records in columns: little-endian int64 offsets and timestamps, int32
  partitions (omitted when the block holds one partition, which the header then names), int32
  topic indexes into the header's topic list (omitted for a single topic), then the values and
  the keys (omitted when no record has one) as msgpack arrays of bin/nil.  Every column is built
  by a C-level pass (``map`` with ``attrgetter``, ``array``, one ``msgpack.packb``), so encoding
  costs a small fraction of what the receiver already paid to fetch the record; it matters
  because encoding shares the interpreter with the fetch loop.  Accepts
  :class:`~sluice.records.Record` and anything with ``key, value, topic, partition, offset,
  timestamp`` (aiokafka's ConsumerRecord, so the receiver never converts records one by one);
  ``read`` returns ``Record`` instances.  The Kafka receiver encodes each fetch into a
  :class:`KafkaPiece` (the same columns for one fetch of one partition) as soon as ``getmany``
  returns it; a block of pieces is byte for byte the block of their records.  Format version 1
  stored values and keys as int32 lengths plus concatenated bytes (two more Python-level passes
  per column); it is still read.  Format version 3 adds a seventh column, the records' headers
  (a msgpack array of ``[key, value]`` pair arrays, empty when no record has a header); version 2
  blocks read with no headers.
* ``"kafka-batches"``: Kafka record batches as the broker sent them
  (:class:`~sluice.storage.kafka_batches.KafkaBatches` pieces, which the Kafka receiver stores
  without building a record); the header's ``segments`` give each piece's topic, partition,
  offset range, record count and byte length, and the reader decodes the records of each range,
  each batch's own CRC checked.
* ``"values"``: any msgpack-able values (socket lines, generator records, user data).
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter
from typing import Any

import msgpack

from sluice.block_info import InvalidMessage, OffsetRange
from sluice.errors import SluiceError
from sluice.records import Record
from sluice.storage.kafka_batches import BatchFormatError, KafkaBatches, decode_batches

MAGIC = b"SLUICEBK"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)  # 1: values/keys as lengths + bytes (no partition shortcut); 2: no headers
_PREAMBLE = struct.Struct(">8sHIQI")
PREAMBLE_SIZE = _PREAMBLE.size
_SWAP = sys.byteorder != "little"
_COLUMNS = tuple(attrgetter(name) for name in ("key", "value", "topic", "partition", "offset"))
_PACKER = msgpack.Packer(use_bin_type=True)
_NIL = b"\xc0"
_NO_HEADERS = b"\x90"  # an empty msgpack array: a record's headers when it has none
_HEADERS = attrgetter("headers")


class FormatError(SluiceError, ValueError):
    """The bytes are not a valid block; the message says what is wrong (the store adds where)."""


class CorruptFormatError(FormatError):
    """Bytes that were a block once and are damaged now (the reader's error, not the writer's)."""

    pass


def _is_kafka(records: list) -> bool:
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


EncodedPiece = KafkaPiece | KafkaBatches
"""Records a receiver stores already in a block's form; a block holds pieces of one type."""
_PIECE_NAMES = {KafkaPiece: "encoded Kafka pieces", KafkaBatches: "Kafka record batches"}
ENCODED_PIECES = tuple(_PIECE_NAMES)


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
    )


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


def _encode_kafka(pieces: Sequence[KafkaPiece]) -> tuple[dict[str, Any], list[Any]]:
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


def encode_parts(stream_id: int, block_id: str, records: list, offset_ranges: tuple[OffsetRange, ...]) -> list[Any]:
    """The block as buffers to write one after the other (no copy of the whole block is made).

    ``records`` are records, or :class:`KafkaPiece` or :class:`KafkaBatches` pieces (all of
    them of one kind, then).
    """
    first = type(records[0]) if records else None
    if first in _PIECE_NAMES and not all(type(p) is first for p in records):
        raise FormatError(f"a block holds {_PIECE_NAMES[first]} and something else")
    if first is KafkaBatches:
        kind, payload = _encode_batches(records)
    elif first is KafkaPiece or _is_kafka(records):
        pieces = records if first is KafkaPiece else [encode_kafka_piece(records)]
        columns, payload = _encode_kafka(pieces)
        kind = {"kind": "kafka", "columns": columns, "num_records": sum(p.num_records for p in pieces)}
    else:
        try:
            payload = [msgpack.packb(records, use_bin_type=True)]
        except (TypeError, ValueError, OverflowError) as exc:
            bad = next((i for i, r in enumerate(records) if not _packable(r)), None)
            where = f" (record {bad}: {type(records[bad]).__name__})" if bad is not None else ""
            raise FormatError(f"records cannot be stored as msgpack{where}: {exc}") from exc
        kind = {"kind": "values", "num_records": len(records)}
    header = {
        "stream_id": stream_id,
        "block_id": block_id,
        "offset_ranges": [r.to_wire() for r in offset_ranges],
        **kind,
    }
    head = msgpack.packb(header, use_bin_type=True)
    crc = zlib.crc32(head)
    for part in payload:
        crc = zlib.crc32(part, crc)
    preamble = _PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(head), sum(map(len, payload)), crc)
    return [preamble, head, *payload]


def _encode_batches(pieces: list[KafkaBatches]) -> tuple[dict[str, Any], list[Any]]:
    """The header's kind and segments, and the pieces' bytes as they are."""
    segments = [[p.topic, p.partition, p.from_offset, p.until_offset, p.num_records, p.nbytes] for p in pieces]
    header = {"kind": "kafka-batches", "segments": segments, "num_records": sum(p.num_records for p in pieces)}
    return header, [p.data for p in pieces]


def encode(stream_id: int, block_id: str, records: list, offset_ranges: tuple[OffsetRange, ...]) -> bytes:
    """Serialize a block; raises FormatError naming the first record that cannot be stored."""
    return b"".join(encode_parts(stream_id, block_id, records, offset_ranges))


def _packable(value: Any) -> bool:
    try:
        msgpack.packb(value, use_bin_type=True)
        return True
    except (TypeError, ValueError, OverflowError):
        return False


def _read_ints(code: str, data: bytes | memoryview) -> array:
    column = array(code)
    column.frombytes(data)
    if _SWAP:
        column.byteswap()
    return column


def _split(lengths: array, data: bytes) -> list[bytes | None]:
    ends = list(accumulate(n if n > 0 else 0 for n in lengths))
    starts = [0, *ends[:-1]]
    return [None if n < 0 else data[s:e] for n, s, e in zip(lengths, starts, ends)]


def _sections(header: dict[str, Any], payload: memoryview, count: int) -> tuple[list[int], list[memoryview]]:
    """The payload cut into the ``count`` column sections the header lists, checked to add up."""
    sizes = header["columns"]["sections"]
    if len(sizes) != count or sum(sizes) != len(payload):
        raise CorruptFormatError("column sizes do not add up to the payload")
    cuts = [0, *accumulate(sizes)]
    return sizes, [payload[cuts[i] : cuts[i + 1]] for i in range(count)]


def _decode_kafka_v1(header: dict[str, Any], payload: memoryview) -> list[Record]:
    columns = header["columns"]
    n = header["num_records"]
    sizes, part = _sections(header, payload, 8)
    offsets, timestamps, partitions = _read_ints("q", part[0]), _read_ints("q", part[1]), _read_ints("i", part[2])
    names = columns["topics"]
    topics = [names[i] for i in _read_ints("i", part[3])] if sizes[3] else [names[0]] * n
    values = _split(_read_ints("i", part[4]), bytes(part[6]))
    keys = _split(_read_ints("i", part[5]), bytes(part[7])) if columns["has_keys"] else [None] * n
    return _rows(n, keys, values, topics, partitions, offsets, timestamps, [()] * n)


def _decode_kafka(header: dict[str, Any], payload: memoryview, version: int) -> list[Record]:
    columns = header["columns"]
    n = header["num_records"]
    sizes, part = _sections(header, payload, 7 if version >= 3 else 6)
    offsets, timestamps = _read_ints("q", part[0]), _read_ints("q", part[1])
    partitions = _read_ints("i", part[2]) if sizes[2] else [columns["partition"]] * n
    names = columns["topics"]
    topics = [names[i] for i in _read_ints("i", part[3])] if sizes[3] else [names[0]] * n
    values = msgpack.unpackb(part[4], raw=False)
    keys = msgpack.unpackb(part[5], raw=False) if columns["has_keys"] else [None] * n
    headers = _decode_headers(part[6]) if version >= 3 and sizes[6] else [()] * n
    if not (isinstance(values, list) and isinstance(keys, list)):
        raise CorruptFormatError("the value or key column is not an array")
    return _rows(n, keys, values, topics, partitions, offsets, timestamps, headers)


def _decode_headers(section: memoryview) -> list:
    """The headers column: one tuple of ``(key, value)`` pairs per record (msgpack arrays as tuples)."""
    headers = msgpack.unpackb(section, raw=False, use_list=False)
    if not isinstance(headers, tuple):
        raise CorruptFormatError("the headers column is not an array")
    return list(headers)


def _decode_batches(header: dict[str, Any], payload: memoryview) -> list[Record]:
    segments = header["segments"]
    if not isinstance(segments, list) or sum(segment[5] for segment in segments) != len(payload):
        raise CorruptFormatError("the record batch segments do not add up to the payload")
    records: list[Record] = []
    at = 0
    try:
        for topic, partition, from_offset, until_offset, count, nbytes in segments:
            decoded = decode_batches(payload[at : at + nbytes], topic, partition, from_offset, until_offset)
            if len(decoded) != count:
                raise CorruptFormatError(
                    f"{topic}/{partition} offsets {from_offset}-{until_offset}: the header "
                    f"counts {count} records, the batches hold {len(decoded)}"
                )
            records += decoded
            at += nbytes
    except BatchFormatError as exc:
        raise CorruptFormatError(str(exc)) from exc
    return records


def _rows(
    n: int, keys: list, values: list, topics: list, partitions: Any, offsets: Any, timestamps: Any, headers: list
) -> list[Record]:
    columns = (keys, values, topics, partitions, offsets, timestamps, headers)
    if any(len(column) != n for column in columns):
        raise CorruptFormatError(f"columns do not all hold the header's {n} records")
    new = tuple.__new__
    return [new(Record, row) for row in zip(*columns)]


def decode(data: bytes) -> tuple[dict[str, Any], list]:
    """Check and parse a block; return (header, records). Raises CorruptFormatError."""
    if len(data) < PREAMBLE_SIZE:
        raise CorruptFormatError(f"truncated: {len(data)} bytes, shorter than the {PREAMBLE_SIZE}-byte preamble")
    magic, version, header_len, payload_len, crc = _PREAMBLE.unpack_from(data)
    if magic != MAGIC:
        raise CorruptFormatError(f"not a Sluice block (magic {magic!r}, expected {MAGIC!r})")
    if version not in READABLE_VERSIONS:
        raise CorruptFormatError(
            f"format version {version} is not supported (this build reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))})"
        )
    end = PREAMBLE_SIZE + header_len + payload_len
    if len(data) != end:
        raise CorruptFormatError(f"size {len(data)} bytes does not match the preamble's {end} bytes (truncated?)")
    body = memoryview(data)[PREAMBLE_SIZE:]
    actual = zlib.crc32(body)
    if actual != crc:
        raise CorruptFormatError(f"CRC32 mismatch: stored {crc:#010x}, computed {actual:#010x}")
    try:
        header = msgpack.unpackb(body[:header_len], raw=False)
        if not isinstance(header, dict):
            raise CorruptFormatError("header is not a map")
        if header.get("kind") == "kafka-batches":
            records = _decode_batches(header, body[header_len:])
        elif header.get("kind") == "kafka":
            payload = body[header_len:]
            records = _decode_kafka(header, payload, version) if version >= 2 else _decode_kafka_v1(header, payload)
        else:
            records = msgpack.unpackb(body[header_len:], raw=False)
    except CorruptFormatError:
        raise
    except (ValueError, KeyError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise CorruptFormatError(f"undecodable block despite a good CRC: {exc}") from exc
    if not isinstance(records, list) or header.get("num_records") != len(records):
        raise CorruptFormatError(
            f"header says {header.get('num_records')} records, payload holds "
            f"{len(records) if isinstance(records, list) else 'no list of'} records"
        )
    try:
        header["offset_ranges"] = tuple(OffsetRange.from_wire(r) for r in header.get("offset_ranges", ()))
    except InvalidMessage as exc:
        raise CorruptFormatError(f"bad offset range in header: {exc}") from exc
    return header, records
