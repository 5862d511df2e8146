"""The ``allocate_blocks`` reply in columnar form: one array per field, no map per block.

A batch can take 10,000 blocks.  As 10,000 wire maps the reply cost the driver most of the
allocation (unpacking 70,000 map entries, then checking and building each block); as columns,
msgpack unpacks a handful of flat arrays in C, the checks run once per column, and the driver
keeps the columns (no object per block unless asked for one).  Receiver ids and topics repeat from block to block, so
they are dictionary-encoded (a table of distinct values, an index per block); offset ranges are
flattened (a count per block, then one column per range field); metadata is sparse (only blocks
that have any).

The per-block and per-range integers travel as *uint columns*: one msgpack ``bin`` of
little-endian unsigned integers, all of one width, the narrowest of 1, 2, 4 or 8 bytes that
holds the column's largest value (8 bytes: signed, so at most 2**63 - 1).  The width is the
byte length divided by the column's entry count, so a column needs no header.  Packing and
unpacking a bin is a copy, and a well-formed one cannot hold anything but integers: the driver
skips a type test per entry and only checks bounds.  The form, field by field:

``streams``            stream ids, in the order their blocks follow (a list)
``blocks_per_stream``  blocks of each of those streams (a list)
``block_ids``          per block (a list of strings)
``receiver_ids``       the distinct receiver ids; ``receivers``: per block, an index into it (uints)
``num_records``        per block (uints)
``locations``          per block (a list of strings)
``topics``             the distinct topics; ``ranges_per_block``: per block, how many ranges (uints)
``range_topics``, ``partitions``, ``from_offsets``, ``until_offsets``
                       per range, blocks in order (uints; a topic as an index into ``topics``)
``metadata``           ``[[block index, map], ...]`` for the blocks with metadata, indices ascending

The tracker keeps each stream queue's columns as its blocks are queued
(:class:`~sluice.block_columns.BlockColumns`), so an allocation hands ready lists to
:func:`encode_columns`.  The driver trusts the tracker no more than the tracker trusts a receiver:
:func:`decode_allocation` checks every column's type, length and bounds as
:meth:`ReceivedBlockInfo.from_wire` checks a block's fields, and an error names the stream, the
column and the entry.  What it returns is columns again, one :class:`BlockColumns` per stream: the
driver builds its block RDD from them, and block objects are built only for whoever asks for one.
"""

from __future__ import annotations

import operator
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from itertools import accumulate, chain, compress, count, repeat
from typing import NoReturn, TypedDict, TypeVar

from sluice.block_columns import BlockColumns
from sluice.block_info import _STR_MAX, MAX_ID_LENGTH, MAX_INT, InvalidMessage

WHERE = "allocate_blocks reply"
_WIDTHS = {1: "B", 2: "H", 4: "I", 8: "q"}  # bytes per entry -> array type code (8: signed, <= MAX_INT)
_SWAP = sys.byteorder == "big"  # the wire is little-endian
assert all(array(code).itemsize == width for width, code in _WIDTHS.items())


class AllocationColumns(TypedDict):
    """The columnar reply as :func:`encode_columns` builds it (the module docstring says each column)."""

    streams: list[int]
    blocks_per_stream: list[int]
    block_ids: list[str]
    receiver_ids: list[str]
    receivers: bytes
    num_records: bytes
    locations: list[str]
    topics: list[str]
    ranges_per_block: bytes
    range_topics: bytes
    partitions: bytes
    from_offsets: bytes
    until_offsets: bytes
    metadata: list[list[object]]  # [block index, its map] for the blocks that have one


def encode_columns(streams: list[int], parts: list[BlockColumns]) -> AllocationColumns:
    """The columnar reply for the blocks of ``streams``, ``parts`` their columns in the same order."""
    joined = BlockColumns.joined(parts)
    receiver_ids = list(dict.fromkeys(joined.receivers))
    topics = list(dict.fromkeys(joined.range_topics))
    top = max(joined.until_offsets, default=0)  # no from_offset is larger
    return {
        "streams": streams,
        "blocks_per_stream": [len(p.block_ids) for p in parts],
        "block_ids": joined.block_ids,
        "receiver_ids": receiver_ids,
        "receivers": _indices(joined.receivers, receiver_ids),
        "num_records": uints(joined.num_records, max(joined.num_records, default=0)),
        "locations": joined.locations,
        "topics": topics,
        "ranges_per_block": uints(joined.ranges_per_block, max(joined.ranges_per_block, default=0)),
        "range_topics": _indices(joined.range_topics, topics),
        "partitions": uints(joined.partitions, max(joined.partitions, default=0)),
        "from_offsets": uints(joined.from_offsets, top),
        "until_offsets": uints(joined.until_offsets, top),
        "metadata": [[i, joined.metadata[i]] for i in compress(count(), joined.metadata)],
    }


def _indices(values: list[str], table: list[str]) -> bytes:
    """The uint column of each value's index in ``table`` (its distinct values in order)."""
    if len(table) == 1:  # one receiver, one topic: every index 0, one byte each
        return bytes(len(values))
    index = {v: i for i, v in enumerate(table)}
    return uints(map(index.__getitem__, values), len(table))


def uints(values: Iterable[int], top: int) -> bytes:
    """A uint column: ``values`` (each 0 to 2**63 - 1, at most ``top``) little-endian, in the
    narrowest width that holds ``top``."""
    packed = array("B" if top < 1 << 8 else "H" if top < 1 << 16 else "I" if top < 1 << 32 else "q", values)
    if _SWAP:
        packed.byteswap()
    return packed.tobytes()


def decode_allocation(reply: object) -> dict[int, BlockColumns]:
    """The blocks per stream a columnar reply describes, every column checked first.

    Raises :class:`InvalidMessage` naming the stream, the column and the entry that is wrong.
    """
    if type(reply) is not dict:
        raise InvalidMessage(f"{WHERE} must be a map of columns, got {type(reply).__name__}")
    columns = _Columns(reply)
    streams = columns.ints("streams")
    counts = columns.ints("blocks_per_stream", length=len(streams))
    if len(set(streams)) != len(streams):
        raise InvalidMessage(f"{WHERE}: column streams names a stream twice: {streams[:20]!r}")
    n = sum(counts)
    columns.stream_of = _stream_finder(streams, counts)
    block_ids = columns.strings("block_ids", n, MAX_ID_LENGTH)
    receiver_ids = columns.table("receiver_ids", _STR_MAX)
    receivers = columns.uints("receivers", n, below=len(receiver_ids))
    num_records = columns.uints("num_records", n)
    locations = columns.strings("locations", n, _STR_MAX)
    topics = columns.table("topics", MAX_ID_LENGTH)
    per_block = columns.uints("ranges_per_block", n)
    count = sum(per_block)
    columns.block_of_range = _block_finder(per_block)
    range_topics = columns.uints("range_topics", count, below=len(topics), per_range=True)
    partitions = columns.uints("partitions", count, per_range=True)
    starts = columns.uints("from_offsets", count, per_range=True)
    ends = columns.uints("until_offsets", count, per_range=True)
    if any(map(operator.gt, starts, ends)):
        r = next(r for r, (start, end) in enumerate(zip(starts, ends)) if start > end)
        columns.fail_range("until_offsets", r, f"until_offset {ends[r]} is below from_offset {starts[r]}")
    metadata = columns.metadata(n)
    joined = BlockColumns.of_columns(
        stream_ids=list(chain.from_iterable(map(repeat, streams, counts))),
        block_ids=block_ids,
        receivers=list(_looked_up(receiver_ids, receivers)),
        num_records=num_records,
        locations=locations,
        metadata=metadata,
        ranges_per_block=per_block,
        range_topics=list(_looked_up(topics, range_topics)),
        partitions=partitions,
        from_offsets=starts,
        until_offsets=ends,
    )
    return {s: joined.take(c) for s, c in zip(streams, counts)}


_Column = TypeVar("_Column", list, bytes)


class _Columns:
    """The checks, one column at a time; an error names the stream the bad entry belongs to."""

    def __init__(self, reply: dict[str, object]) -> None:
        self.reply = reply
        self.stream_of = lambda entry: None
        self.block_of_range = lambda r: 0

    def _fail(self, column: str, entry: int | None, problem: str) -> NoReturn:
        stream = self.stream_of(entry) if entry is not None else None
        at = "" if entry is None else f", entry {entry}"
        of = "" if stream is None else f"stream {stream}, "
        raise InvalidMessage(f"{WHERE}: {of}column {column}{at}: {problem}")

    def fail_range(self, column: str, r: int, problem: str) -> NoReturn:
        """An error in the ``r``-th range, named by its block (the entry) and its range number."""
        self._fail(column, self.block_of_range(r), f"range {r}: {problem}")

    def _get(self, column: str, kind: type[_Column]) -> _Column:
        if column not in self.reply:
            self._fail(column, None, "is missing")
        values = self.reply[column]
        if type(values) is not kind:
            self._fail(column, None, f"must be {'a list' if kind is list else 'bytes'}, got {type(values).__name__}")
        return values

    def _list(self, column: str, length: int | None) -> list:
        values = self._get(column, list)
        if length is not None and len(values) != length:
            self._fail(column, None, f"has {len(values)} entries, the reply describes {length}")
        return values

    def ints(self, column: str, *, length: int | None = None) -> list[int]:
        """A short list of integers from 0 to 2**63 - 1 (stream ids, block counts)."""
        values = self._list(column, length)
        if not values or (set(map(type, values)) == {int} and min(values) >= 0 and max(values) <= MAX_INT):
            return values
        for entry, v in enumerate(values):
            if type(v) is not int:
                self._fail(column, entry, f"must be an integer, got {type(v).__name__}")
            if not 0 <= v <= MAX_INT:
                self._fail(column, entry, f"{v} is out of bounds (0 <= value < 2**63)")
        raise AssertionError("unreachable")

    def uints(self, column: str, length: int, *, below: int | None = None, per_range: bool = False) -> list[int]:
        """A uint column of ``length`` entries (see the module docstring), each ``< below`` if given;
        ``per_range``: its entries are ranges, named on error by their block and range number."""
        data = self._get(column, bytes)
        if not length:
            if data:
                self._fail(column, None, f"has {len(data)} bytes, the reply describes no entry")
            return []
        width, rest = divmod(len(data), length)
        if rest or width not in _WIDTHS:
            self._fail(column, None, f"has {len(data)} bytes: not 1, 2, 4 or 8 for each of its {length} entries")
        packed = array(_WIDTHS[width])
        packed.frombytes(data)
        if _SWAP:
            packed.byteswap()
        values = packed.tolist()
        if (width < 8 or min(values) >= 0) and (below is None or max(values) < below):
            return values
        entry = next(i for i, v in enumerate(values) if v < 0 or (below is not None and v >= below))
        problem = f"{values[entry]} is out of bounds (0 <= value < {below if below is not None else '2**63'})"
        if per_range:
            self.fail_range(column, entry, problem)
        self._fail(column, entry, problem)

    def strings(self, column: str, length: int, limit: int) -> list[str]:
        values = self._list(column, length)
        if not values or (set(map(type, values)) == {str} and "" not in values and max(map(len, values)) <= limit):
            return values
        self._bad_string(column, values, limit, per_block=True)

    def table(self, column: str, limit: int) -> list[str]:
        values = self._list(column, None)
        if all(type(v) is str and 0 < len(v) <= limit for v in values):
            return values
        self._bad_string(column, values, limit, per_block=False)

    def _bad_string(self, column: str, values: list, limit: int, *, per_block: bool) -> NoReturn:
        for i, v in enumerate(values):
            if type(v) is not str or not 0 < len(v) <= limit:
                got = type(v).__name__ if type(v) is not str else f"{len(v)} characters"
                self._fail(
                    column,
                    i if per_block else None,
                    f"{'table entry ' + str(i) + ' ' if not per_block else ''}must be a non-empty string "
                    f"of at most {limit} characters, got {got}",
                )
        raise AssertionError("unreachable")

    def metadata(self, n: int) -> list[dict | None]:
        """Each block's map, None for a block the sparse column leaves out."""
        entries = self._list("metadata", None)
        out: list[dict | None] = [None] * n
        last = -1
        for k, entry in enumerate(entries):
            if type(entry) is not list or len(entry) != 2 or type(entry[0]) is not int:
                self._fail("metadata", None, f"entry {k} must be [block index, map]")
            index, value = entry
            if not last < index < n:
                self._fail("metadata", None, f"entry {k}: block index {index} must be ascending and below {n}")
            if type(value) is not dict:
                self._fail("metadata", index, f"must be a map, got {type(value).__name__}")
            out[index] = value
            last = index
        return out


def _stream_finder(streams: list[int], counts: list[int]):
    """entry index -> the stream its block belongs to (for error messages only)."""
    ends = list(accumulate(counts))

    def find(entry: int | None) -> int | None:
        k = bisect_right(ends, entry) if entry is not None else len(ends)
        return streams[k] if k < len(ends) else None

    return find


def _block_finder(per_block: list[int]):
    """range index -> the block it belongs to (for error messages only)."""
    ends = list(accumulate(per_block))
    return lambda r: bisect_right(ends, r)


def _looked_up(table: list[str], indices: list[int]) -> Iterable[str]:
    """The table entry of each index (checked to be in bounds); the only entry, with no lookups, for a
    table of one (one receiver, one topic)."""
    return repeat(table[0], len(indices)) if len(table) == 1 else map(table.__getitem__, indices)
