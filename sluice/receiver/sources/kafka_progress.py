"""``PartitionProgress``: where a Kafka receiver stands in each partition it owns.  Pure.

Per partition: the offset after the last record stored (the next fetch's position), how far that is
behind the end a reader can reach (the high watermark; under ``read_committed`` the last stable
offset, the LSO), the records between the LSO and the high watermark (held back by transactions
still open: an operator's sign of a stuck producer, which Kafka's own tools show as the same
difference), and the Kafka timestamp of the last record stored.  The lag feeds the
heartbeat and the rate split, the timestamp the tracker's time behind (a partition behind has its
next record waiting in Kafka, no older than the one stored before it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiokafka import TopicPartition


class PartitionProgress:
    """Positions, lags and last timestamps of the partitions a receiver owns."""

    def __init__(self) -> None:
        self.next_offset: dict[TopicPartition, int] = {}  # after the last record stored
        self.lag: dict[TopicPartition, int] = {}
        self.last_timestamp: dict[TopicPartition, int] = {}  # Kafka timestamp of the last record stored
        self.open_records: dict[TopicPartition, int] = {}  # high watermark - LSO, under read_committed

    def took(self, tp: TopicPartition, until: int, last_timestamp_ms: int, highwater: int | None) -> None:
        """A piece of ``tp`` up to ``until`` is stored.  The lag moves with it: a throttled receiver
        stores a large fetch piece by piece for long, and its heartbeat must say what still waits."""
        self.next_offset[tp] = until
        if last_timestamp_ms >= 0:
            self.last_timestamp[tp] = last_timestamp_ms
        if highwater is not None:
            self.lag[tp] = max(0, highwater - until)

    def update_lag(
        self, owned: Iterable[TopicPartition], highwater: Callable[[TopicPartition], int | None]
    ) -> dict[TopicPartition, int]:
        """Each owned partition's lag behind ``highwater`` where both are known; the ones updated."""
        updated = {}
        for tp in owned:
            high, position = highwater(tp), self.next_offset.get(tp)
            if high is not None and position is not None:
                updated[tp] = self.lag[tp] = max(0, high - position)
        return updated

    def update_open(
        self,
        owned: Iterable[TopicPartition],
        highwater: Callable[[TopicPartition], int | None],
        stable: Callable[[TopicPartition], int | None],
    ) -> dict[TopicPartition, int]:
        """Each owned partition's records past its last stable offset, where both ends are known
        (a fetch under ``read_committed`` returns both); the ones updated."""
        updated = {}
        for tp in owned:
            high, lso = highwater(tp), stable(tp)
            if high is not None and lso is not None and lso >= 0:
                updated[tp] = self.open_records[tp] = max(0, high - lso)
        return updated

    def total_open(self, owned: Iterable[TopicPartition]) -> int | None:
        """Records held back by open transactions in ``owned`` (None: none known, as under
        ``read_uncommitted``, which reads them)."""
        values = [self.open_records[tp] for tp in owned if tp in self.open_records]
        return sum(values) if values else None

    def total_lag(self, owned: Iterable[TopicPartition]) -> int | None:
        """Records behind the high watermarks of ``owned`` (None: none known)."""
        values = [self.lag[tp] for tp in owned if tp in self.lag]
        return sum(values) if values else None

    def head_timestamp_ms(self, owned: Iterable[TopicPartition]) -> int | None:
        """The oldest last-stored timestamp among the ``owned`` partitions that are behind."""
        behind = [self.last_timestamp.get(tp, -1) for tp in owned if self.lag.get(tp)]
        return min((t for t in behind if t >= 0), default=None)

    def forget(self, tp: TopicPartition, lag: bool = True) -> None:
        """``tp`` is no longer owned (its next owner starts from the group's committed position)."""
        self.next_offset.pop(tp, None)
        self.last_timestamp.pop(tp, None)
        self.open_records.pop(tp, None)
        if lag:
            self.lag.pop(tp, None)
