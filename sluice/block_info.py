"""What a receiver tells the tracker about a stored block (Spark's ``ReceivedBlockInfo``).

These types cross every boundary: receiver → tracker (``add_block``), tracker → WAL, tracker →
driver (``allocate_blocks``), and the direct-Kafka driver uses :class:`OffsetRange` for its batch
ranges.  They are defined once here, with their msgpack form and its validation: a peer's map is
hostile until ``from_wire`` has checked every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from sluice.errors import SluiceError

MAX_ID_LENGTH = 256
MAX_INT = 2**63 - 1  # record counts and offsets: a signed 64-bit integer, as Kafka's
OLDEST_TIMESTAMP = "oldest_ts_ms"
"""The ``metadata`` key of a block's oldest record's Kafka timestamp (ms since the epoch): the
tracker's ``sluice_stream_lag_seconds`` reads it; a block without it (older receivers, sources
without timestamps) does not count there."""


class InvalidMessage(SluiceError, ValueError):
    """A wire map that does not describe a valid value; the message names the field."""


_STR_MAX = MAX_ID_LENGTH * 16
_KIND_NAMES = {int: "an integer", str: "a string", dict: "a map", list: "a list"}


def _refuse(where: str, name: str, value: Any, kind: type, limit: int = _STR_MAX) -> NoReturn:
    """Raise the :class:`InvalidMessage` that says what is wrong with field ``name`` (error path only)."""
    if isinstance(value, bool) and kind is not bool:
        raise InvalidMessage(f"{where}.{name} must be {_KIND_NAMES[kind]}, got a boolean")
    if not isinstance(value, kind):
        raise InvalidMessage(f"{where}.{name} must be {_KIND_NAMES[kind]}, got {type(value).__name__}")
    raise InvalidMessage(f"{where}.{name} is longer than {limit} characters")


def _is_int(value: Any) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def block_id_prefix(stream_id: int, receiver_id: str, incarnation: int | None = None) -> str:
    """The id space of one receiver's blocks; with ``incarnation``, of one registration of it.

    The tracker accepts from a registration only ids in its own space, so one credential cannot
    pre-claim the ids of another receiver's blocks.
    """
    receiver = f"input-{stream_id}-{receiver_id}-"
    return receiver if incarnation is None else f"{receiver}{incarnation}-"


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[from_offset, until_offset)`` of one topic partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        if (
            self.partition < 0
            or self.from_offset < 0
            or self.until_offset < self.from_offset
            or self.until_offset > MAX_INT
            or self.partition > MAX_INT
        ):
            raise InvalidMessage(
                f"offset range {self.topic}/{self.partition} [{self.from_offset}, {self.until_offset}) "
                "must have 0 <= partition < 2**63 and 0 <= from_offset <= until_offset < 2**63"
            )

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def count(self) -> int:
        return self.until_offset - self.from_offset

    def to_wire(self) -> list[Any]:
        return [self.topic, self.partition, self.from_offset, self.until_offset]

    @classmethod
    def from_wire(cls, data: Any, where: str = "offset_range") -> OffsetRange:
        return _range_from_wire(data, where)


def _range_from_wire(data: Any, where: str, index: int | None = None) -> OffsetRange:
    """:meth:`OffsetRange.from_wire`; ``index`` says which of a block's ranges, named only on error."""
    if isinstance(data, (list, tuple)) and len(data) == 4:
        topic, partition, start, until = data
        if (
            type(partition) is int
            and type(start) is int
            and type(until) is int
            and isinstance(topic, str)
            and 0 < len(topic) <= MAX_ID_LENGTH
        ):
            return OffsetRange(topic, partition, start, until)
    label = where if index is None else f"{where}.offset_ranges[{index}]"
    if not isinstance(data, (list, tuple)) or len(data) != 4:
        raise InvalidMessage(f"{label} must be [topic, partition, from_offset, until_offset]")
    if not isinstance(topic, str) or not 0 < len(topic) <= MAX_ID_LENGTH:
        raise InvalidMessage(f"{label}.topic must be a non-empty string of at most {MAX_ID_LENGTH} characters")
    for name, value in (("partition", partition), ("from_offset", start), ("until_offset", until)):
        if not _is_int(value):
            raise InvalidMessage(f"{label}.{name} must be an integer")
    return OffsetRange(topic, partition, start, until)  # int subclasses other than bool


@dataclass(frozen=True, slots=True)
class ReceivedBlockInfo:
    """A durably stored block, as the tracker records it.

    ``offset_ranges`` are the source offsets the block's records cover.  When the tracker finds that
    part of a block was already added by an earlier block (a receiver that restarted and re-read),
    it records the block with those ranges trimmed: readers skip every record whose offset falls
    outside the recorded ranges, so each source record is counted once.

    :param stream_id: the stream.
    :param block_id: unique per stream (at most 256 characters).
    :param receiver_id: the receiver that stored it.
    :param num_records: records inside ``offset_ranges`` (after trimming), or all records.
    :param location: the store URL the block can be read from by any executor.
    :param offset_ranges: see above.
    :param metadata: free-form, carried along unchanged; :data:`OLDEST_TIMESTAMP` is the one key
        the tracker reads.
    """

    stream_id: int
    block_id: str
    receiver_id: str
    num_records: int
    location: str
    offset_ranges: tuple[OffsetRange, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.stream_id <= MAX_INT or not 0 <= self.num_records <= MAX_INT:
            raise InvalidMessage(f"block {self.block_id}: stream_id and num_records must be from 0 to 2**63 - 1")
        for name in ("block_id", "receiver_id", "location"):
            value = getattr(self, name)
            if not value or len(value) > MAX_ID_LENGTH * 16:
                raise InvalidMessage(f"block info {name} must be a non-empty string")

    @property
    def oldest_timestamp_ms(self) -> int | None:
        """The Kafka timestamp of the block's oldest record, when the receiver sent one."""
        value = self.metadata.get(OLDEST_TIMESTAMP)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    def with_ranges(self, ranges: tuple[OffsetRange, ...], num_records: int) -> ReceivedBlockInfo:
        return replace(self, offset_ranges=ranges, num_records=num_records)

    def to_wire(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id,
            "block_id": self.block_id,
            "receiver_id": self.receiver_id,
            "num_records": self.num_records,
            "location": self.location,
            "offset_ranges": [r.to_wire() for r in self.offset_ranges],
            "metadata": self.metadata,
        }

    @classmethod
    def from_wire(cls, data: Any, where: str = "block") -> ReceivedBlockInfo:
        """The block a peer's map describes, every field checked; an error names the first bad one.

        One pass with exact-type tests first: the tracker decodes tens of thousands of these per
        second, and a well-formed map never reaches the code that words an error.
        """
        if type(data) is not dict:
            if not isinstance(data, Mapping):
                raise InvalidMessage(f"{where} must be a map, got {type(data).__name__}")
            data = dict(data)
        try:
            block_id, stream_id, receiver_id = data["block_id"], data["stream_id"], data["receiver_id"]
            num_records, location = data["num_records"], data["location"]
        except KeyError as exc:
            raise InvalidMessage(f"{where}.{exc.args[0]} is missing") from None
        ranges, metadata = data.get("offset_ranges", ()), data.get("metadata", _NO_METADATA)
        if not isinstance(block_id, str) or len(block_id) > MAX_ID_LENGTH:
            _refuse(where, "block_id", block_id, str, MAX_ID_LENGTH)
        if type(stream_id) is not int and not _is_int(stream_id):
            _refuse(where, "stream_id", stream_id, int)
        if not isinstance(receiver_id, str) or len(receiver_id) > _STR_MAX:
            _refuse(where, "receiver_id", receiver_id, str)
        if type(num_records) is not int and not _is_int(num_records):
            _refuse(where, "num_records", num_records, int)
        if not isinstance(location, str) or len(location) > _STR_MAX:
            _refuse(where, "location", location, str)
        if not isinstance(ranges, (list, tuple)):
            _refuse(where, "offset_ranges", ranges, list)
        if not isinstance(metadata, dict):
            _refuse(where, "metadata", metadata, dict)
        parsed = tuple([_range_from_wire(r, where, i) for i, r in enumerate(ranges)])
        return cls(stream_id, block_id, receiver_id, num_records, location, parsed, dict(metadata))


_NO_METADATA: dict[str, Any] = {}
