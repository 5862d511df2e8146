"""Blocks as columns (:class:`BlockColumns`): one list per field of :class:`ReceivedBlockInfo`.

A batch can take 10,000 blocks.  The tracker keeps each stream queue in this form as blocks are
queued, so an allocation hands ready columns to the reply; the driver gets the same columns back
from the reply and builds its block RDD from them (locations, block ids, ranges, record counts).
Neither side needs 10,000 block objects on the way, and building them (20,000 frozen objects with
their ranges) was the larger part of an allocation's cost on the driver.  The objects are still
there for whoever asks: a :class:`BlockColumns` is a sequence of :class:`ReceivedBlockInfo`, built
all at once on the first item asked for and then kept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, chain, repeat
from typing import Any, overload

from sluice.block_info import OffsetRange, ReceivedBlockInfo

#: One offset range as a plain row: (topic, partition, from_offset, until_offset).
RangeRow = tuple[str, int, int, int]


class BlockColumns(Sequence[ReceivedBlockInfo]):
    """Blocks, field by field; a block's offset ranges follow one another in the range columns.

    ``metadata`` holds a block's map, or None for a block without one (most).  The columns are
    plain lists and may be read directly; :meth:`append` and :meth:`take` are the only changes.
    """

    BLOCK_COLUMNS = ("stream_ids", "block_ids", "receivers", "num_records", "locations", "metadata", "ranges_per_block")
    RANGE_COLUMNS = ("range_topics", "partitions", "from_offsets", "until_offsets")
    COLUMNS = BLOCK_COLUMNS + RANGE_COLUMNS
    __slots__ = COLUMNS + ("_blocks",)

    stream_ids: list[int]
    block_ids: list[str]
    receivers: list[str]
    num_records: list[int]
    locations: list[str]
    metadata: list[dict[str, Any] | None]
    ranges_per_block: list[int]
    range_topics: list[str]
    partitions: list[int]
    from_offsets: list[int]
    until_offsets: list[int]

    def __init__(self, blocks: Iterable[ReceivedBlockInfo] = ()) -> None:
        for name in self.COLUMNS:
            setattr(self, name, [])
        self._blocks: list[ReceivedBlockInfo] | None = None
        for info in blocks:
            self.append(info)

    @classmethod
    def of_columns(cls, **columns: list[Any]) -> BlockColumns:
        """Columns given ready (every name of :attr:`COLUMNS`, checked by the caller), not copied."""
        made = cls()
        for name in cls.COLUMNS:
            setattr(made, name, columns[name])
        return made

    @classmethod
    def joined(cls, parts: Sequence[BlockColumns]) -> BlockColumns:
        """The blocks of ``parts``, one after another (the part itself when there is one)."""
        if len(parts) == 1:
            return parts[0]
        return cls.of_columns(
            **{name: list(chain.from_iterable(getattr(p, name) for p in parts)) for name in cls.COLUMNS}
        )

    def append(self, info: ReceivedBlockInfo) -> None:
        self._blocks = None
        self.stream_ids.append(info.stream_id)
        self.block_ids.append(info.block_id)
        self.receivers.append(info.receiver_id)
        self.num_records.append(info.num_records)
        self.locations.append(info.location)
        self.metadata.append(info.metadata or None)
        self.ranges_per_block.append(len(info.offset_ranges))
        for r in info.offset_ranges:
            self.range_topics.append(r.topic)
            self.partitions.append(r.partition)
            self.from_offsets.append(r.from_offset)
            self.until_offsets.append(r.until_offset)

    def take(self, k: int) -> BlockColumns:
        """The columns of the first ``k`` blocks, removed from these."""
        self._blocks = None
        taken = BlockColumns()
        ranges = sum(self.ranges_per_block[:k]) if k < len(self.block_ids) else len(self.range_topics)
        for names, end in ((self.BLOCK_COLUMNS, k), (self.RANGE_COLUMNS, ranges)):
            for name in names:
                column = getattr(self, name)
                if end >= len(column):  # all of it (every block, the common case): no copy
                    setattr(taken, name, column)
                    setattr(self, name, [])
                else:
                    setattr(taken, name, column[:end])
                    del column[:end]
        return taken

    @property
    def offset_ranges(self) -> Sequence[OffsetRange]:
        """Every block's offset ranges, in block order (built with the blocks, on first use)."""
        return _OffsetRanges(self)

    def range_rows(self) -> list[tuple[RangeRow, ...]]:
        """Each block's offset ranges as plain rows, without building :class:`OffsetRange` objects."""
        rows = list(zip(self.range_topics, self.partitions, self.from_offsets, self.until_offsets))
        return _grouped(rows, self.ranges_per_block)

    # -- the sequence of blocks ------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.block_ids)

    @overload
    def __getitem__(self, index: int) -> ReceivedBlockInfo: ...
    @overload
    def __getitem__(self, index: slice) -> list[ReceivedBlockInfo]: ...

    def __getitem__(self, index: int | slice) -> ReceivedBlockInfo | list[ReceivedBlockInfo]:
        return self._built()[index]

    def __iter__(self) -> Iterator[ReceivedBlockInfo]:
        return iter(self._built())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BlockColumns):
            return all(getattr(self, name) == getattr(other, name) for name in self.COLUMNS)
        if isinstance(other, (list, tuple)):
            return self._built() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # changes with append and take

    def __repr__(self) -> str:
        return f"BlockColumns({self._built()!r})"

    def _built(self) -> list[ReceivedBlockInfo]:
        if self._blocks is not None:
            return self._blocks
        ranges = _objects(
            OffsetRange,
            len(self.range_topics),
            {
                "topic": self.range_topics,
                "partition": self.partitions,
                "from_offset": self.from_offsets,
                "until_offset": self.until_offsets,
            },
        )
        self._blocks = _objects(
            ReceivedBlockInfo,
            len(self.block_ids),
            {
                "stream_id": self.stream_ids,
                "block_id": self.block_ids,
                "receiver_id": self.receivers,
                "num_records": self.num_records,
                "location": self.locations,
                "offset_ranges": _grouped(ranges, self.ranges_per_block),
                "metadata": [dict(m) if m else {} for m in self.metadata],
            },
        )
        return self._blocks


class _OffsetRanges(Sequence[OffsetRange]):
    """The ranges of a :class:`BlockColumns`' blocks: counted from the columns, built on first use."""

    __slots__ = ("_blocks", "_ranges")

    def __init__(self, blocks: BlockColumns) -> None:
        self._blocks = blocks
        self._ranges: tuple[OffsetRange, ...] | None = None

    def __len__(self) -> int:
        return len(self._blocks.range_topics)

    def __getitem__(self, index: Any) -> Any:
        if self._ranges is None:
            self._ranges = tuple(chain.from_iterable(b.offset_ranges for b in self._blocks))
        return self._ranges[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # a view of columns that change: unhashable

    def __repr__(self) -> str:
        return repr(tuple(self))


def _objects(cls: type, n: int, fields: dict[str, Iterable[Any]]) -> list:
    """``n`` instances of the frozen, slotted ``cls``, filled column by column.

    ``ReceivedBlockInfo`` and ``OffsetRange`` are frozen: their ``__init__`` sets each field through
    ``object.__setattr__`` and then checks it again.  Columns are checked when they are made (the
    tracker's from blocks it checked, the driver's in ``decode_allocation``), and setting each
    field's slot over a whole column runs in C, several times faster than ``n`` calls of ``__init__``.
    """
    objects: list[Any] = list(map(object.__new__, repeat(cls, n)))
    for name, values in fields.items():
        deque(map(cls.__dict__[name].__set__, objects, values), maxlen=0)
    return objects


def _grouped(items: list, per_block: list[int]) -> list[tuple]:
    """``items`` cut into one tuple per block of ``per_block`` items each (one per block, the
    common case, in one pass in C)."""
    if len(items) == len(per_block) and max(per_block, default=0) == 1:
        return list(zip(items))
    starts = accumulate(per_block, initial=0)
    return [tuple(items[start : start + k]) for start, k in zip(starts, per_block)]
