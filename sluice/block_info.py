"""What a receiver tells the tracker about a stored block (Spark's ``ReceivedBlockInfo``).

These types cross every boundary: receiver → tracker (``add_block``), tracker → WAL, tracker →
driver (``allocate_blocks``), and the direct-Kafka driver uses :class:`OffsetRange` for its batch
ranges.  They are defined once here, with their msgpack form and its validation: a peer's map is
hostile until ``from_wire`` has checked every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

MAX_ID_LENGTH = 256


class InvalidMessage(ValueError):
    """A wire map that does not describe a valid value; the message names the field."""


def _field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(data, dict) and not isinstance(data, Mapping):  # dict first: the ABC check is slow
        raise InvalidMessage(f"{where} must be a map, got {type(data).__name__}")
    if name not in data:
        raise InvalidMessage(f"{where}.{name} is missing")
    value = data[name]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise InvalidMessage(f"{where}.{name} must be {_kind_name(kind)}, got a boolean")
    if not isinstance(value, kind):
        raise InvalidMessage(f"{where}.{name} must be {_kind_name(kind)}, got {type(value).__name__}")
    if isinstance(value, str) and len(value) > MAX_ID_LENGTH * 16:
        raise InvalidMessage(f"{where}.{name} is longer than {MAX_ID_LENGTH * 16} characters")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({int: "an integer", str: "a string", float: "a number", dict: "a map",
                        list: "a list", type(None): "nil"}.get(k, k.__name__) for k in kinds)


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[from_offset, until_offset)`` of one topic partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        if self.partition < 0 or self.from_offset < 0 or self.until_offset < self.from_offset:
            raise InvalidMessage(
                f"offset range {self.topic}/{self.partition} [{self.from_offset}, {self.until_offset}) "
                "must have partition >= 0 and 0 <= from_offset <= until_offset"
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
        if not isinstance(data, (list, tuple)) or len(data) != 4:
            raise InvalidMessage(f"{where} must be [topic, partition, from_offset, until_offset]")
        topic, partition, start, until = data
        if not isinstance(topic, str) or not topic or len(topic) > MAX_ID_LENGTH:
            raise InvalidMessage(f"{where}.topic must be a non-empty string of at most {MAX_ID_LENGTH} characters")
        for name, value in (("partition", partition), ("from_offset", start), ("until_offset", until)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidMessage(f"{where}.{name} must be an integer")
        return cls(topic, partition, start, until)


@dataclass(frozen=True, slots=True)
class ReceivedBlockInfo:
    """A durably stored block, as the tracker records it.

    ``offset_ranges`` are the source offsets the block's records cover.  When the tracker finds that
    part of a block was already added by an earlier block (a receiver that restarted and re-read),
    it records the block with those ranges trimmed: readers skip every record whose offset falls
    outside the recorded ranges, so each source record is counted once.
    """

    stream_id: int
    block_id: str
    receiver_id: str
    num_records: int
    location: str
    offset_ranges: tuple[OffsetRange, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.stream_id < 0 or self.num_records < 0:
            raise InvalidMessage(f"block {self.block_id}: stream_id and num_records must be >= 0")
        for name in ("block_id", "receiver_id", "location"):
            value = getattr(self, name)
            if not value or len(value) > MAX_ID_LENGTH * 16:
                raise InvalidMessage(f"block info {name} must be a non-empty string")

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
        fast = _from_wire_fast(data)
        if fast is not None:
            return fast
        ranges = _field(data, "offset_ranges", (list, tuple), where) if "offset_ranges" in data else []
        metadata = _field(data, "metadata", dict, where) if "metadata" in data else {}
        block_id = _field(data, "block_id", str, where)
        if len(block_id) > MAX_ID_LENGTH:
            raise InvalidMessage(f"{where}.block_id is longer than {MAX_ID_LENGTH} characters")
        return cls(
            stream_id=_field(data, "stream_id", int, where),
            block_id=block_id,
            receiver_id=_field(data, "receiver_id", str, where),
            num_records=_field(data, "num_records", int, where),
            location=_field(data, "location", str, where),
            offset_ranges=tuple(OffsetRange.from_wire(r, f"{where}.offset_ranges[{i}]") for i, r in enumerate(ranges)),
            metadata=dict(metadata),
        )


_STR_MAX = MAX_ID_LENGTH * 16


def _from_wire_fast(w: Any) -> ReceivedBlockInfo | None:
    """The common, well-formed case of :meth:`ReceivedBlockInfo.from_wire` with exact-type checks.

    The tracker decodes tens of thousands of these per second; the general path (which names the
    bad field) is several times slower.  Anything unusual returns None and takes that path, so the
    accepted values and the error messages are the same.
    """
    if type(w) is not dict:
        return None
    try:
        stream_id, block_id, receiver_id = w["stream_id"], w["block_id"], w["receiver_id"]
        num_records, location = w["num_records"], w["location"]
    except KeyError:
        return None
    ranges = w.get("offset_ranges", ())
    metadata = w.get("metadata", {})
    if not (type(stream_id) is int and type(num_records) is int and type(block_id) is str
            and type(receiver_id) is str and type(location) is str and type(metadata) is dict
            and type(ranges) in (list, tuple) and len(block_id) <= MAX_ID_LENGTH
            and len(receiver_id) <= _STR_MAX and len(location) <= _STR_MAX):
        return None
    parsed = []
    for r in ranges:
        if type(r) not in (list, tuple) or len(r) != 4:
            return None
        topic, partition, start, until = r
        if not (type(topic) is str and 0 < len(topic) <= MAX_ID_LENGTH and type(partition) is int
                and type(start) is int and type(until) is int):
            return None
        parsed.append(OffsetRange(topic, partition, start, until))
    return ReceivedBlockInfo(stream_id, block_id, receiver_id, num_records, location, tuple(parsed), dict(metadata))
