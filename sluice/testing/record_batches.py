"""Kafka v2 record batches built by hand, byte by byte, for the tests of records that clients do not
make: a header key that is not UTF-8 (aiokafka's builder takes only ``str`` keys), a record whose
fields disagree with its length, a header flood.  :func:`produce_batch` sends such a batch to a
broker as it is, on aiokafka's producer.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

Header = tuple[bytes, bytes | None]

_BATCH_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount: what the CRC covers, before the records


def varint(value: int) -> bytes:
    """Kafka's zigzag varint (and varlong)."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _nullable(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record_body(
    offset_delta: int,
    value: bytes | None,
    key: bytes | None = None,
    headers: Sequence[Header] = (),
    timestamp_delta: int = 0,
    header_count: int | None = None,
) -> bytes:
    """A record's fields after its length; ``header_count`` forges the count."""
    count = len(headers) if header_count is None else header_count
    parts = [b"\x00", varint(timestamp_delta), varint(offset_delta), _nullable(key), _nullable(value), varint(count)]
    parts += [varint(len(k)) + k + _nullable(v) for k, v in headers]
    return b"".join(parts)


def record(offset_delta: int, value: bytes | None, key: bytes | None = None, headers: Sequence[Header] = ()) -> bytes:
    """One record, length-prefixed, as a batch holds it."""
    body = record_body(offset_delta, value, key, headers)
    return varint(len(body)) + body


def framed(body: bytes) -> bytes:
    """``body`` with its length in front: a record of whatever fields."""
    return varint(len(body)) + body


def batch(
    base_offset: int,
    records: Sequence[bytes],
    first_timestamp: int = 1_000,
    count: int | None = None,
    *,
    producer_id: int = -1,
    attributes: int = 0,
) -> bytes:
    """An uncompressed v2 batch of ``records`` (as :func:`record` makes them), its CRC right;
    ``producer_id`` and ``attributes`` (0x10 transactional, 0x20 control) as a transaction's."""
    # aiokafka loads with the first batch built (the module is imported by tests that need none)
    from aiokafka.record.util import calc_crc32c

    n = len(records) if count is None else count
    fields = (attributes, max(n - 1, 0), first_timestamp, first_timestamp, producer_id, 0 if producer_id >= 0 else -1)
    tail = _BATCH_TAIL.pack(*fields, -1, n) + b"".join(records)
    crc = calc_crc32c(tail)
    return struct.pack(">qiibI", base_offset, 4 + 1 + 4 + len(tail), 0, 2, crc) + tail


def transactional(base_offset: int, producer_id: int, values: Sequence[bytes]) -> bytes:
    """A batch of a transaction of ``producer_id``: one record per value."""
    return batch(base_offset, [record(i, v) for i, v in enumerate(values)], producer_id=producer_id, attributes=0x10)


def marker(offset: int, producer_id: int, *, abort: bool) -> bytes:
    """The control batch that ends ``producer_id``'s transaction: an ABORT or COMMIT marker."""
    key = struct.pack(">hh", 0, 0 if abort else 1)
    return batch(offset, [record(0, b"\x00\x00\x00\x00\x00\x00", key)], producer_id=producer_id, attributes=0x30)


async def produce_batch(bootstrap_servers: str, topic: str, partition: int, data: bytes, records: int) -> None:
    """Send the batch ``data`` of ``records`` records to ``topic``/``partition`` byte for byte
    (the broker sets its offsets), through aiokafka's producer with the built bytes swapped in."""
    # aiokafka loads with the first batch produced
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers)
    await producer.start()
    try:
        built = producer.create_batch()
        built._buffer, built._relative_offset = data, records
        built.close()
        await (await producer.send_batch(built, topic, partition=partition))
    finally:
        await producer.stop()
