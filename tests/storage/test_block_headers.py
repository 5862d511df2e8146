"""Kafka record headers through the block formats: the columns of a ``kafka`` block (records,
receiver pieces, a mix of pieces with and without headers) and the record batches of a
``kafka-batches`` block, plus a block of the previous format version, which has none."""

from __future__ import annotations

import struct
import zlib

import msgpack
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from sluice.block_info import OffsetRange
from sluice.kafka.record_batches import KafkaBatches
from sluice.records import Record
from sluice.storage import block_format
from sluice.storage.block_format import decode, encode, encode_kafka_piece

HEADERS = (("trace", b"t-1"), ("trace", b"t-2"), ("empty", None))


def records(start: int, n: int, headers=HEADERS) -> list[Record]:
    return [
        Record(b"k", b"v%d" % i, "t", 0, i, 1_000 + i, headers if i % 2 == 0 else ()) for i in range(start, start + n)
    ]


def test_headers_survive_a_kafka_block_of_records_and_of_pieces() -> None:
    rows = records(0, 4)
    assert decode(encode(1, "b", rows, (OffsetRange("t", 0, 0, 4),)))[1] == rows
    plain = [r._replace(headers=()) for r in records(4, 3)]
    pieces = [encode_kafka_piece(rows, ("t", 0)), encode_kafka_piece(plain, ("t", 0))]
    assert pieces[1].headers is None  # no record has one: no column cost
    assert decode(encode(1, "b", pieces, (OffsetRange("t", 0, 0, 7),)))[1] == rows + plain


def test_headers_survive_a_block_of_record_batches() -> None:
    # magic 2, no compression, not transactional, no producer id, epoch or sequence, 1 MiB
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(3):
        builder.append(i, timestamp=1_000 + i, key=None, value=b"%d" % i, headers=list(HEADERS) if i == 1 else [])
    data = bytes(builder.build())
    piece = KafkaBatches("t", 0, memoryview(data), 0, 3, 3)
    _, got = decode(encode(1, "b", [piece], (OffsetRange("t", 0, 0, 3),)))
    assert [r.headers for r in got] == [(), HEADERS, ()]


def test_a_block_of_the_previous_version_reads_with_no_headers() -> None:
    rows = [r._replace(headers=()) for r in records(0, 2)]
    parts = encode(1, "b", rows, (OffsetRange("t", 0, 0, 2),))
    preamble = block_format._PREAMBLE
    magic, _, head_len, payload_len, _ = preamble.unpack_from(parts)
    header = msgpack.unpackb(parts[preamble.size : preamble.size + head_len])
    header["columns"]["sections"] = header["columns"]["sections"][:6]  # version 2: six columns
    head = msgpack.packb(header, use_bin_type=True)
    payload = parts[preamble.size + head_len :]
    old = preamble.pack(magic, 2, len(head), payload_len, zlib.crc32(payload, zlib.crc32(head))) + head + payload
    assert decode(old)[1] == rows
    assert struct.unpack_from(">H", parts, 8)[0] == 3
