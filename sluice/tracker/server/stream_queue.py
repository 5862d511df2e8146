"""``StreamQueue``: one stream's queued (unallocated) blocks and everything kept about them.

The tracker answers allocations from reply columns kept as blocks are queued, counts the records
queued per stream for the rate controller, and numbers each queued block for Structured Streaming.
Those are four views of one queue; each change goes through a method here, so no caller can move
one view without the others.  Pure: no I/O, no logging; the tracker logs a change before making it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from sluice.block_columns import BlockColumns
from sluice.block_info import ReceivedBlockInfo


class StreamQueue:
    """A stream's queued blocks in queue order, with their reply columns, records and numbers.

    Invariants: ``columns`` describes exactly the queued blocks, in order; ``records`` is their
    record sum; their numbers rise strictly in queue order and are all below ``next_seq``.

    :param next_seq: the number the next queued block gets (a stream keeps counting across a
        tracker restart and across its queue being dropped while empty).
    """

    __slots__ = ("_blocks", "_seqs", "columns", "records", "next_seq")

    def __init__(self, next_seq: int = 0) -> None:
        self._blocks: deque[ReceivedBlockInfo] = deque()
        self._seqs: deque[int] = deque()
        self.columns = BlockColumns()
        self.records = 0
        self.next_seq = next_seq

    def __len__(self) -> int:
        return len(self._blocks)

    def __iter__(self) -> Iterator[ReceivedBlockInfo]:
        return iter(self._blocks)

    def numbered(self) -> Iterator[tuple[int, ReceivedBlockInfo]]:
        """``(seq, block)`` in queue order."""
        return zip(self._seqs, self._blocks)

    @property
    def first_seq(self) -> int:
        """The number of the oldest queued block; ``next_seq`` when none is queued."""
        return self._seqs[0] if self._seqs else self.next_seq

    def append(self, info: ReceivedBlockInfo, seq: int | None = None) -> int:
        """Queue ``info`` as block number ``seq`` (``None``: the next number, for logs that carry
        none) and return its number."""
        seq = self.next_seq if seq is None else seq
        self._blocks.append(info)
        self._seqs.append(seq)
        self.columns.append(info)
        self.records += info.num_records
        self.next_seq = max(self.next_seq, seq + 1)
        return seq

    def fitting(self, max_records: int | None) -> int:
        """How many blocks from the head a batch bounded at ``max_records`` takes (``None``: all;
        see :func:`fitting`)."""
        return len(self._blocks) if max_records is None else fitting(self.columns.num_records, max_records)

    def take(self, k: int) -> tuple[list[ReceivedBlockInfo], BlockColumns]:
        """Remove the first ``k`` blocks; return them as objects and as reply columns."""
        columns = self.columns.take(k)
        if k >= len(self._blocks):
            blocks = list(self._blocks)
            self._blocks.clear()
            self._seqs.clear()
            self.records = 0
            return blocks, columns
        blocks = [self._blocks.popleft() for _ in range(k)]
        for _ in range(k):
            self._seqs.popleft()
        self.records -= sum(b.num_records for b in blocks)
        return blocks, columns

    def drop_below(self, until_seq: int) -> list[ReceivedBlockInfo]:
        """Remove and return the head blocks numbered below ``until_seq``."""
        gone: list[ReceivedBlockInfo] = []
        while self._seqs and self._seqs[0] < until_seq:
            self._seqs.popleft()
            block = self._blocks.popleft()
            self.records -= block.num_records
            gone.append(block)
        if gone:
            self.columns.take(len(gone))
        return gone

    def remove(self, block_ids: set[str]) -> list[ReceivedBlockInfo]:
        """Remove and return exactly the blocks named, wherever they are queued; the rest keep their order."""
        taken: list[ReceivedBlockInfo] = []
        kept: list[tuple[int, ReceivedBlockInfo]] = []
        for seq, block in self.numbered():
            if block.block_id in block_ids:
                taken.append(block)
            else:
                kept.append((seq, block))
        self._seqs = deque(seq for seq, _ in kept)
        self._blocks = deque(block for _, block in kept)
        self.columns = BlockColumns(self._blocks)
        self.records = sum(b.num_records for b in self._blocks)
        return taken

    def listed(
        self, from_seq: int, until_seq: int | None = None, max_records: int | None = None
    ) -> list[tuple[int, ReceivedBlockInfo]]:
        """The blocks numbered ``from_seq <= seq < until_seq`` with their numbers, in order, left
        queued; ``max_records`` keeps the head whose records fit (``None``: all; see :func:`fitting`)."""
        found = [(seq, b) for seq, b in self.numbered() if seq >= from_seq and (until_seq is None or seq < until_seq)]
        if max_records is None:
            return found
        return found[: fitting((b.num_records for _, b in found), max_records)]


def fitting(num_records: Iterable[int], max_records: int) -> int:
    """How many of the blocks (their record counts, in order) fit in ``max_records``, at least one:
    a block larger than the bound must not stall its stream."""
    count = total = 0
    for n in num_records:
        if count and total + n > max_records:
            break
        total += n
        count += 1
    return count
