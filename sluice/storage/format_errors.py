"""The errors of the block format, apart so each kind's module can raise them."""

from __future__ import annotations

from sluice.errors import SluiceError


class FormatError(SluiceError, ValueError):
    """The bytes are not a valid block; the message says what is wrong (the store adds where)."""


class CorruptFormatError(FormatError):
    """Bytes that were a block once and are damaged now (the reader's error, not the writer's)."""

    pass


def record_count(header: dict) -> int:
    """The header's record count, refused unless a non-negative integer."""
    n = header.get("num_records")
    if type(n) is not int or n < 0:
        raise CorruptFormatError(f"the header's record count {n!r:.40} is not a non-negative integer")
    return n
