"""The ``allocate_blocks`` reply in columnar form: one array per field, no map per block.

A batch can take 10,000 blocks.  As 10,000 wire maps the reply cost the driver most of the
allocation (unpacking 70,000 map entries, then checking and building each block); as columns,
msgpack unpacks a handful of flat arrays in C, the checks run once per column, and only the
objects themselves are built per block.  Receiver ids and topics repeat from block to block, so
they are dictionary-encoded (a table of distinct values, an index per block); offset ranges are
flattened (a count per block, four integers per range); metadata is sparse (only blocks that have
any).  The form, field by field:

``streams``            stream ids, in the order their blocks follow
``blocks_per_stream``  blocks of each of those streams
``block_ids``          per block
``receiver_ids``       the distinct receiver ids; ``receivers``: per block, an index into it
``num_records``        per block
``locations``          per block
``topics``             the distinct topics; ``ranges_per_block``: per block, how many ranges
``ranges``             per range, four integers: topic index, partition, from_offset, until_offset
``metadata``           ``[[block index, map], ...]`` for the blocks with metadata, indices ascending

The driver trusts the tracker no more than the tracker trusts a receiver: :func:`decode_allocation`
checks every column's type, length and bounds as :meth:`ReceivedBlockInfo.from_wire` checks a
block's fields, and an error names the stream, the column and the entry.
"""

from __future__ import annotations

import gc
import operator
from collections import deque
from itertools import chain, repeat
from operator import attrgetter
from typing import Any, NoReturn

from sluice.block_info import _STR_MAX, MAX_ID_LENGTH, InvalidMessage, OffsetRange, ReceivedBlockInfo

Allocation = dict[int, list[ReceivedBlockInfo]]
WHERE = "allocate_blocks reply"


def encode_allocation(allocation: Allocation) -> dict[str, Any]:
    """The columnar reply for ``allocation`` (stream id -> its blocks in order), built column by
    column (the tracker builds it inside its event loop: no Python loop over fields per block)."""
    blocks = list(chain.from_iterable(allocation.values()))
    receiver_ids = list(dict.fromkeys(map(_RECEIVER, blocks)))
    receiver_index = {r: i for i, r in enumerate(receiver_ids)}
    ranges_of = list(map(_RANGES, blocks))
    ranges = list(chain.from_iterable(ranges_of))
    topics = list(dict.fromkeys(map(_TOPIC, ranges)))
    topic_index = {t: i for i, t in enumerate(topics)}
    flat: list[Any] = [0] * (4 * len(ranges))
    flat[0::4] = map(topic_index.__getitem__, map(_TOPIC, ranges))
    flat[1::4] = map(_PARTITION, ranges)
    flat[2::4] = map(_FROM, ranges)
    flat[3::4] = map(_UNTIL, ranges)
    return {"streams": list(allocation), "blocks_per_stream": list(map(len, allocation.values())),
            "block_ids": list(map(_BLOCK_ID, blocks)), "receiver_ids": receiver_ids,
            "receivers": list(map(receiver_index.__getitem__, map(_RECEIVER, blocks))),
            "num_records": list(map(_NUM_RECORDS, blocks)), "locations": list(map(_LOCATION, blocks)),
            "topics": topics, "ranges_per_block": list(map(len, ranges_of)), "ranges": flat,
            "metadata": [[i, m] for i, m in enumerate(map(_METADATA, blocks)) if m]}


_BLOCK_ID, _RECEIVER, _NUM_RECORDS, _LOCATION, _RANGES, _METADATA = map(attrgetter, (
    "block_id", "receiver_id", "num_records", "location", "offset_ranges", "metadata"))
_TOPIC, _PARTITION, _FROM, _UNTIL = map(attrgetter, ("topic", "partition", "from_offset", "until_offset"))


def decode_allocation(reply: Any) -> Allocation:
    """The blocks per stream a columnar reply describes, every column checked first.

    Raises :class:`InvalidMessage` naming the stream, the column and the entry that is wrong.
    """
    if type(reply) is not dict:
        raise InvalidMessage(f"{WHERE} must be a map of columns, got {type(reply).__name__}")
    columns = _Columns(reply)
    streams = columns.ints("streams", minimum=0)
    counts = columns.ints("blocks_per_stream", minimum=0, length=len(streams))
    if len(set(streams)) != len(streams):
        raise InvalidMessage(f"{WHERE}: column streams names a stream twice: {streams[:20]!r}")
    n = sum(counts)
    columns.stream_of = _stream_finder(streams, counts)
    block_ids = columns.strings("block_ids", n, MAX_ID_LENGTH)
    receiver_ids = columns.table("receiver_ids", _STR_MAX)
    receivers = columns.ints("receivers", minimum=0, length=n, below=len(receiver_ids))
    num_records = columns.ints("num_records", minimum=0, length=n)
    locations = columns.strings("locations", n, _STR_MAX)
    topics = columns.table("topics", MAX_ID_LENGTH)
    per_block = columns.ints("ranges_per_block", minimum=0, length=n)
    flat = columns.ranges(sum(per_block), len(topics), per_block)
    metadata = columns.metadata(n)
    return _build(streams, counts, block_ids, list(map(receiver_ids.__getitem__, receivers)), num_records, locations,
                  topics, per_block, flat, metadata)


def _only(values: list, kind: type) -> bool:
    """Whether every value is exactly of ``kind`` (bool is not int here), in one pass in C."""
    return not values or set(map(type, values)) == {kind}


class _Columns:
    """The checks, one column at a time; an error names the stream the bad entry belongs to."""

    def __init__(self, reply: dict) -> None:
        self.reply = reply
        self.stream_of = lambda entry: None

    def _fail(self, column: str, entry: int | None, problem: str) -> NoReturn:
        stream = self.stream_of(entry) if entry is not None else None
        at = "" if entry is None else f", entry {entry}"
        of = "" if stream is None else f"stream {stream}, "
        raise InvalidMessage(f"{WHERE}: {of}column {column}{at}: {problem}")

    def _list(self, column: str, length: int | None) -> list:
        if column not in self.reply:
            self._fail(column, None, "is missing")
        values = self.reply[column]
        if type(values) is not list:
            self._fail(column, None, f"must be a list, got {type(values).__name__}")
        if length is not None and len(values) != length:
            self._fail(column, None, f"has {len(values)} entries, the reply describes {length}")
        return values

    def ints(self, column: str, *, minimum: int, length: int | None = None, below: int | None = None) -> list[int]:
        values = self._list(column, length)
        if _only(values, int) and (not values or (
                min(values) >= minimum and (below is None or max(values) < below))):
            return values
        for entry, v in enumerate(values):
            if type(v) is not int:
                self._fail(column, entry, f"must be an integer, got {type(v).__name__}")
            if v < minimum or (below is not None and v >= below):
                allowed = f"{minimum} <= value" + (f" < {below}" if below is not None else "")
                self._fail(column, entry, f"{v} is out of bounds ({allowed})")
        raise AssertionError("unreachable")

    def strings(self, column: str, length: int, limit: int) -> list[str]:
        values = self._list(column, length)
        if _only(values, str) and (not values or (
                min(map(len, values)) > 0 and max(map(len, values)) <= limit)):
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
                self._fail(column, i if per_block else None,
                           f"{'table entry ' + str(i) + ' ' if not per_block else ''}must be a non-empty string "
                           f"of at most {limit} characters, got {got}")
        raise AssertionError("unreachable")

    def ranges(self, count: int, topics: int, per_block: list[int]) -> list[int]:
        """Four integers per range: topic index < ``topics``, partition >= 0, 0 <= from <= until."""
        flat = self._list("ranges", 4 * count)
        if _only(flat, int):
            t, p, f, u = flat[0::4], flat[1::4], flat[2::4], flat[3::4]
            if not flat or (min(t) >= 0 and max(t) < topics and min(p) >= 0 and min(f) >= 0
                            and not any(map(operator.gt, f, u))):
                return flat
        block_of = [b for b, k in enumerate(per_block) for _ in range(k)]
        for r in range(count):
            ti, part, start, until = flat[4 * r:4 * r + 4]
            what = f"range {r} [topic {ti!r}, partition {part!r}, {start!r}, {until!r})"
            if not all(type(v) is int for v in (ti, part, start, until)):
                self._fail("ranges", block_of[r], f"{what}: four integers are required")
            if not 0 <= ti < topics:
                self._fail("ranges", block_of[r], f"{what}: topic index out of bounds (0 <= index < {topics})")
            if part < 0 or start < 0 or until < start:
                self._fail("ranges", block_of[r], f"{what}: partition >= 0 and 0 <= from <= until are required")
        raise AssertionError("unreachable")

    def metadata(self, n: int) -> dict[int, dict]:
        entries = self._list("metadata", None)
        out: dict[int, dict] = {}
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
    def find(entry: int | None) -> int | None:
        if entry is None:
            return None
        end = 0
        for stream, count in zip(streams, counts):
            end += count
            if entry < end:
                return stream
        return None
    return find


def _built(cls: type, n: int, fields: dict[str, Any]) -> list:
    """``n`` instances of the frozen, slotted ``cls``, filled column by column.

    ``ReceivedBlockInfo`` and ``OffsetRange`` are frozen: their ``__init__`` sets each field through
    ``object.__setattr__`` and then re-checks it.  That check is what the columns have passed in
    bulk, and building 10,000 blocks one ``__init__`` at a time costs more than all the rest of the
    decode; setting each field's slot over a whole column runs in C.
    """
    objects = list(map(object.__new__, repeat(cls, n)))
    for name, values in fields.items():
        deque(map(cls.__dict__[name].__set__, objects, values), maxlen=0)
    return objects


def _build(streams: list[int], counts: list[int], block_ids: list[str], receivers: list[str],
           num_records: list[int], locations: list[str], topics: list[str], per_block: list[int],
           flat: list[int], metadata: dict[int, dict]) -> Allocation:
    """The blocks, with the cyclic garbage collector paused: building 30,000 objects that form no
    cycle would otherwise set off collections that traverse every live object of the driver."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return _build_blocks(streams, counts, block_ids, receivers, num_records, locations, topics, per_block,
                             flat, metadata)
    finally:
        if paused:
            gc.enable()


def _build_blocks(streams: list[int], counts: list[int], block_ids: list[str], receivers: list[str],
                  num_records: list[int], locations: list[str], topics: list[str], per_block: list[int],
                  flat: list[int], metadata: dict[int, dict]) -> Allocation:
    n = len(block_ids)
    ranges = _built(OffsetRange, len(flat) // 4, {
        "topic": map(topics.__getitem__, flat[0::4]), "partition": flat[1::4], "from_offset": flat[2::4],
        "until_offset": flat[3::4]})
    if all(k == 1 for k in per_block):
        grouped: list[tuple] = list(zip(ranges))
    else:
        grouped, r = [], 0
        for k in per_block:
            grouped.append(tuple(ranges[r:r + k]))
            r += k
    metadata_column = list(map(dict, repeat((), n)))
    for i, value in metadata.items():
        metadata_column[i] = dict(value)
    blocks = _built(ReceivedBlockInfo, n, {
        "stream_id": chain.from_iterable(repeat(s, c) for s, c in zip(streams, counts)), "block_id": block_ids,
        "receiver_id": receivers, "num_records": num_records, "location": locations, "offset_ranges": grouped,
        "metadata": metadata_column})
    out: Allocation = {}
    start = 0
    for stream_id, count in zip(streams, counts):
        out[stream_id] = blocks[start:start + count]
        start += count
    return out
