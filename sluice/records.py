"""The record type of Kafka blocks; other sources store plain values (str, bytes, numbers...)."""

from __future__ import annotations

from typing import Any, NamedTuple

Headers = tuple[tuple[str | bytes, bytes | None], ...]
"""A record's headers in the broker's order: ``(key, value)`` pairs, keys may repeat (Kafka's model).

A key is a ``str`` when its bytes are UTF-8 and the ``bytes`` it is otherwise: Kafka's protocol
calls header keys strings, but brokers do not check them and the Java client reads any bytes.  A
batch function that compares keys with text sees such a key as not matching; one that needs
Java's reading decodes it with ``key.decode("utf-8", "replace")``, which is what the DataFrames'
``headers`` column (``key: string``) holds."""


class Record(NamedTuple):
    """One Kafka record as stored in a block and returned by ``BlockStore.read``.

    A plain tuple (not aiokafka's ConsumerRecord) so that it packs to a msgpack array cheaply and
    unpickles in a PySpark worker without aiokafka installed there.
    """

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    headers: Headers = ()


def as_bytes(value: Any) -> bytes | None:
    """A key or value as the bytes Kafka carries: bytes as they are, text as UTF-8, anything else
    as its ``str`` in UTF-8 (what a sink writes and a row shows)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return str(value).encode("utf-8")
