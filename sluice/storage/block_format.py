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
  (:class:`~sluice.kafka.record_batches.KafkaBatches` pieces, which the Kafka receiver stores
  without building a record); the header's ``segments`` give each piece's topic, partition,
  offset range, record count and byte length, and the reader decodes the records of each range,
  each batch's own CRC checked.
* ``"values"``: any msgpack-able values (socket lines, generator records, user data).

Reading trusts no declared size: the preamble's lengths are checked against the bytes read, each
kind checks its counts and column sizes before building a list (:mod:`~sluice.storage.block_kafka`),
compressed record batches inflate under a cap (:mod:`~sluice.kafka.record_batches`), and a
``values`` payload decodes under a budget of :data:`VALUES_EXPANSION` times its bytes (plus
:data:`VALUES_BUDGET_FLOOR`): a payload of empty maps or arrays, 64 to 72 bytes of objects per
byte, is refused once it passes the budget instead of filling the task's memory.
"""

from __future__ import annotations

import struct
import sys
import zlib
from typing import Any

import msgpack

from sluice.block_info import InvalidMessage, OffsetRange
from sluice.kafka.bad_records import BadRecord, BadRecordError
from sluice.kafka.batch_decode import HeaderBudget
from sluice.kafka.record_batches import BatchFormatError, KafkaBatches, decode_batches
from sluice.storage.block_kafka import KafkaPiece, decode_kafka, decode_kafka_v1, encode_pieces, is_kafka
from sluice.storage.block_kafka import encode_kafka_piece as encode_kafka_piece
from sluice.storage.format_errors import CorruptFormatError, FormatError, record_count

__all__ = [
    "ENCODED_PIECES",
    "CorruptFormatError",
    "EncodedPiece",
    "FormatError",
    "KafkaPiece",
    "decode",
    "encode",
    "encode_kafka_piece",
    "encode_parts",
]

MAGIC = b"SLUICEBK"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)  # 1: values/keys as lengths + bytes (no partition shortcut); 2: no headers
_PREAMBLE = struct.Struct(">8sHIQI")
PREAMBLE_SIZE = _PREAMBLE.size
VALUES_EXPANSION = 16
"""Bytes of maps and arrays a ``values`` payload may decode into per stored byte (beyond the floor).

Records of a few fields take 10 to 20 times their msgpack bytes as Python objects; a flood of
empty containers takes 64 to 72.  Scalars are not counted: none takes more than about 20 times
its bytes."""
VALUES_BUDGET_FLOOR = 16 << 20

EncodedPiece = KafkaPiece | KafkaBatches
"""Records a receiver stores already in a block's form; a block holds pieces of one type."""
_PIECE_NAMES = {KafkaPiece: "encoded Kafka pieces", KafkaBatches: "Kafka record batches"}
ENCODED_PIECES = tuple(_PIECE_NAMES)


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
    elif first is KafkaPiece or is_kafka(records):
        pieces = records if first is KafkaPiece else [encode_kafka_piece(records)]
        columns, payload = encode_pieces(pieces)
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


def _decode_batches(header: dict[str, Any], payload: memoryview, n: int, bad: list[BadRecord] | None) -> list:

    segments = header["segments"]
    if (
        not isinstance(segments, list)
        or not all(isinstance(s, list) and len(s) == 6 and type(s[5]) is int and s[5] >= 0 for s in segments)
        or sum(segment[5] for segment in segments) != len(payload)
        or sum(segment[4] for segment in segments) != n
    ):
        raise CorruptFormatError("the record batch segments do not add up to the payload and the record count")
    records: list = []
    at = 0
    budget = HeaderBudget()  # one for the whole block: its headers are in memory together
    try:
        for topic, partition, from_offset, until_offset, count, nbytes in segments:
            wrong: list[BadRecord] | None = [] if bad is not None else None
            data = payload[at : at + nbytes]
            decoded = decode_batches(data, topic, partition, from_offset, until_offset, wrong, budget)
            # a bad record's offsets are counted, not its records: with one, fewer records is no damage
            if len(decoded) > count or (not wrong and len(decoded) != count):
                raise CorruptFormatError(
                    f"{topic}/{partition} offsets {from_offset}-{until_offset}: the header "
                    f"counts {count} records, the batches hold {len(decoded)}"
                )
            if bad is not None and wrong:
                bad += wrong
            records += decoded
            at += nbytes
    except BatchFormatError as exc:
        raise CorruptFormatError(str(exc)) from exc
    return records


class _Budget:
    """Counts the bytes of the maps and arrays a ``values`` payload decodes into, as they are built."""

    def __init__(self, stored: int) -> None:
        self.left = VALUES_BUDGET_FLOOR + VALUES_EXPANSION * stored

    def spend(self, container: Any) -> Any:
        self.left -= sys.getsizeof(container)
        if self.left < 0:
            raise CorruptFormatError(
                f"the header or values decode into more than {VALUES_EXPANSION} times their bytes "
                f"(plus {VALUES_BUDGET_FLOOR >> 20} MiB) of maps and arrays: refused"
            )
        return container


def _decode_values(payload: memoryview) -> list:
    budget = _Budget(len(payload))
    records = msgpack.unpackb(payload, raw=False, list_hook=budget.spend, object_hook=budget.spend)
    if not isinstance(records, list):
        raise CorruptFormatError("the values payload is not an array")
    return records


def _records(header: dict[str, Any], payload: memoryview, n: int, version: int, bad: list[BadRecord] | None) -> list:
    """The payload's records, by the header's kind."""
    if header.get("kind") == "kafka-batches":
        return _decode_batches(header, payload, n, bad)
    if header.get("kind") == "kafka":
        return decode_kafka(header, payload, n, version, bad) if version >= 2 else decode_kafka_v1(header, payload, n)
    return _decode_values(payload)


def decode(data: bytes, bad: list[BadRecord] | None = None) -> tuple[dict[str, Any], list]:
    """Check and parse a block; return (header, records). Raises CorruptFormatError.

    ``bad``: Kafka records that cannot be decoded are appended to it and left out of the records;
    without it, the first one raises :class:`~sluice.kafka.bad_records.BadRecordError`."""
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
        budget = _Budget(header_len)
        header = msgpack.unpackb(body[:header_len], raw=False, list_hook=budget.spend, object_hook=budget.spend)
        if not isinstance(header, dict):
            raise CorruptFormatError("header is not a map")
        n = record_count(header)
        records = _records(header, body[header_len:], n, version, bad)
    except (CorruptFormatError, BadRecordError):
        raise
    except (
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        msgpack.ExtraData,
        msgpack.FormatError,
        msgpack.StackError,
    ) as exc:
        raise CorruptFormatError(f"undecodable block despite a good CRC: {exc}") from exc
    if len(records) != n and not (bad and len(records) < n):
        raise CorruptFormatError(f"header says {n} records, payload holds {len(records)} records")
    try:
        header["offset_ranges"] = tuple(OffsetRange.from_wire(r) for r in header.get("offset_ranges", ()))
    except InvalidMessage as exc:
        raise CorruptFormatError(f"bad offset range in header: {exc}") from exc
    return header, records
