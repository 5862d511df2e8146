"""The record type of Kafka blocks; other sources store plain values (str, bytes, numbers...)."""

from __future__ import annotations

from typing import NamedTuple


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
