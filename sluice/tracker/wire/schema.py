"""The request schema: what each field of a tracker request may hold, checked before any handler.

Every value a peer sends reaches the write-ahead log, a snapshot or a reply, so every one is bounded
here: integers (counts and offsets below 2**63, times within :data:`MAX_TIME_MS`), string lengths,
and the depth and size of the free-form maps (block metadata, a batch's info).  A field is one
:class:`Field`; :data:`sluice.tracker.wire.protocol.OPS` names each op's fields with them, so a new op
is one declarative entry.  Pure: no I/O, tested without sockets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeGuard

from sluice.block_info import MAX_ID_LENGTH, MAX_INT, OLDEST_TIMESTAMP, InvalidMessage, ReceivedBlockInfo
from sluice.stages import STAMPS, check_stamps
from sluice.tracker.wire.framing import pack

MAX_TIME_MS = 10**14  # ms since the epoch: about the year 5138; any real batch time is below
MAX_STREAM_ID = 2**31 - 1
MAX_TEXT = 4096  # report_error messages, deregistration reasons
MAX_DEPTH = 8  # nesting of block metadata and batch info maps
MAX_METADATA_ITEMS = 1024  # containers and scalars in one metadata map, all levels
MAX_METADATA_BYTES = 16 << 10  # its msgpack size
MAX_BATCH_INFO_BYTES = 64 << 10
MAX_RATE = 1e15


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Field:
    """One request field: ``check(value, where)`` returns the value or raises InvalidMessage.

    The value is whatever msgpack decoded (``object``: the check narrows it); what it returns is
    the field's type in the op's request (:mod:`sluice.tracker.wire.messages`)."""

    check: Callable[[object, str], object]
    required: bool = True
    allowed: str = ""  # said in the error

    def optional(self) -> Field:
        return Field(self.check, False, self.allowed)


def Int(lo: int = 0, hi: int = MAX_INT, *, nullable: bool = False) -> Field:
    def check(value: object, where: str) -> object:
        if value is None and nullable:
            return value
        if not _is_int(value) or not lo <= value <= hi:
            raise InvalidMessage(f"{where} = {_show(value)} is not allowed: expected an integer from {lo} to {hi}")
        return value

    return Field(check)


def Str(max_len: int = MAX_ID_LENGTH, *, min_len: int = 1, nullable: bool = False) -> Field:
    def check(value: object, where: str) -> object:
        if value is None and nullable:
            return value
        if not isinstance(value, str) or not min_len <= len(value) <= max_len:
            raise InvalidMessage(
                f"{where} = {_show(value)} is not allowed: expected a string of {min_len} to {max_len} characters"
            )
        return value

    return Field(check)


def Bool() -> Field:
    def check(value: object, where: str) -> object:
        if not isinstance(value, bool):
            raise InvalidMessage(f"{where} = {_show(value)} is not allowed: expected true or false")
        return value

    return Field(check)


def Rate() -> Field:
    def check(value: object, where: str) -> object:
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not math.isfinite(value)
            or not 0 <= value <= MAX_RATE
        ):
            raise InvalidMessage(
                f"{where} = {_show(value)} is not allowed: expected a finite number from 0 to {MAX_RATE:g}"
            )
        return value

    return Field(check)


def Tree(max_bytes: int) -> Field:
    """A free-form map: at most :data:`MAX_DEPTH` deep, :data:`MAX_METADATA_ITEMS` items, ``max_bytes``."""

    def check(value: object, where: str) -> object:
        check_tree(value, where, max_bytes)
        return value

    return Field(check)


def Block() -> Field:
    """An ``add_block`` block: :meth:`ReceivedBlockInfo.from_wire` plus the schema's bounds."""

    def check(value: object, where: str) -> object:
        info = ReceivedBlockInfo.from_wire(value, where)
        if info.stream_id > MAX_STREAM_ID:
            raise InvalidMessage(f"{where}.stream_id = {info.stream_id} is not allowed: at most {MAX_STREAM_ID}")
        if len(info.receiver_id) > MAX_ID_LENGTH:
            raise InvalidMessage(f"{where}.receiver_id is longer than {MAX_ID_LENGTH} characters")
        if info.metadata:
            check_tree(info.metadata, f"{where}.metadata", MAX_METADATA_BYTES)
            oldest = info.metadata.get(OLDEST_TIMESTAMP)
            if oldest is not None and (not _is_int(oldest) or not 0 <= oldest <= MAX_TIME_MS):
                raise InvalidMessage(
                    f"{where}.metadata.{OLDEST_TIMESTAMP} = {_show(oldest)} is not allowed: expected a Kafka "
                    f"timestamp, an integer from 0 to {MAX_TIME_MS} (ms since the epoch), or no such key"
                )
            if STAMPS in info.metadata and (wrong := check_stamps(info.metadata[STAMPS])) is not None:
                raise InvalidMessage(f"{where}.metadata.{STAMPS} {wrong}")
        return info

    return Field(check)


def Strs(max_items: int, max_len: int = MAX_ID_LENGTH) -> Field:
    """A list of at most ``max_items`` non-empty strings of at most ``max_len`` characters."""

    def check(value: object, where: str) -> object:
        if not isinstance(value, list) or len(value) > max_items:
            raise InvalidMessage(f"{where} is not allowed: expected a list of at most {max_items} strings")
        for item in value:
            if not isinstance(item, str) or not 1 <= len(item) <= max_len:
                raise InvalidMessage(
                    f"{where} entry {_show(item)} is not allowed: expected a string of 1 to {max_len} characters"
                )
        return value

    return Field(check)


def MaxRecords() -> Field:
    """``allocate_blocks.max_records``: ``[[stream_id, records >= 1], ...]``, one entry per stream."""

    def check(value: object, where: str) -> object:
        if not isinstance(value, list) or len(value) > 4096:
            raise InvalidMessage(f"{where} is not allowed: expected a list of at most 4096 [stream_id, records]")
        limits: dict[int, int] = {}
        for pair in value:
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not all(_is_int(v) for v in pair)
                or not 0 <= pair[0] <= MAX_STREAM_ID
                or not 1 <= pair[1] <= MAX_INT
            ):
                raise InvalidMessage(
                    f"{where} entry {_show(pair)} is not allowed: expected "
                    f"[stream_id from 0 to {MAX_STREAM_ID}, records from 1 to {MAX_INT}]"
                )
            limits[pair[0]] = pair[1]
        return limits

    return Field(check)


def check_tree(value: object, where: str, max_bytes: int) -> None:
    """A map of maps, lists and scalars, bounded in depth, items and msgpack size (no recursion:
    a hostile depth must not reach Python's recursion limit here or when it is packed later)."""
    if not isinstance(value, dict):
        raise InvalidMessage(f"{where} must be a map, got {type(value).__name__}")
    stack: list[tuple[object, int]] = [(value, 1)]
    items = 0
    while stack:
        node, depth = stack.pop()
        items += 1
        if items > MAX_METADATA_ITEMS:
            raise InvalidMessage(f"{where} holds more than {MAX_METADATA_ITEMS} items")
        if isinstance(node, (dict, list)):
            if depth > MAX_DEPTH:
                raise InvalidMessage(f"{where} is nested deeper than {MAX_DEPTH} levels")
            children = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
        elif _is_int(node) and not -(2**63) <= node <= MAX_INT:
            raise InvalidMessage(f"{where} holds an integer outside [-2**63, 2**63)")
    if len(pack(value)) > max_bytes:
        raise InvalidMessage(f"{where} is larger than {max_bytes} bytes")


def _show(value: object) -> str:
    return f"{value!r:.80}"
