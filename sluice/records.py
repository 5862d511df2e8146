"""The record type of Kafka blocks; other sources store plain values (str, bytes, numbers...)."""

from __future__ import annotations

from typing import NamedTuple

Headers = tuple[tuple[str, bytes | None], ...]
"""A record's headers in the broker's order: ``(key, value)`` pairs, keys may repeat (Kafka's model)."""


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
