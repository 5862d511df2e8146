"""The receiver bench's instruments: where a round's seconds went, and when its last record was
acknowledged (subclasses of the product's pusher and Kafka receiver, timing what they already do)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from harness import series

from sluice.receiver.block_pusher import BlockPusher
from sluice.receiver.sources.kafka import KafkaReceiver
from sluice.receiver.supervisor import ReceiverSupervisor


class Spent(dict):
    """Seconds spent per part of a round (``getmany``: awaiting it; ``fetch``: awaiting the receiver's
    fetch rounds; ``store``: cutting fetched batches into pieces and storing them, of which
    ``store_wait``: awaiting ``store_encoded``, where the limiter and a full buffer hold a receiver back;
    ``cpu_<process>``: CPU seconds of each process over the measured window, see :meth:`cpu_from`).

    :param cpu_clock: the CPU seconds used so far by each process that takes part in a round.
    """

    def __init__(self, cpu_clock: Callable[[], dict[str, float]]) -> None:
        super().__init__()
        self.cpu_clock = cpu_clock
        self._cpu_start: dict[str, float] = {}

    def cpu_from(self) -> None:
        """The measured window starts now (its first record)."""
        self._cpu_start = self.cpu_clock()

    def cpu_to(self) -> None:
        """The measured window ends now: each process's CPU seconds since :meth:`cpu_from`."""
        for name, seconds in self.cpu_clock().items():
            self[f"cpu_{name}"] = seconds - self._cpu_start[name]

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.perf_counter() - started

    def timed(self, name: str, call):
        async def timed_call(*args, **kwargs):
            with self.part(name):
                return await call(*args, **kwargs)

        return timed_call


class CountingPusher(BlockPusher):
    """Notes the first stored record and the acknowledgement of the last."""

    def __init__(self, *args, expected: int, spent: Spent, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.expected = expected
        self.spent = spent
        self.acked = 0
        self.first: float | None = None
        self.all_stored: float | None = None
        self.done = asyncio.Event()

    async def push_encoded(self, piece, metadata, fetched_ms=None) -> None:
        if self.first is None:  # noted after the first piece was cut: ms after its fetch, <0.5% of a round
            self.first = time.perf_counter()
            self.spent.cpu_from()
        await super().push_encoded(piece, metadata, fetched_ms)
        if self.records_stored >= self.expected and self.all_stored is None:
            self.all_stored = time.perf_counter()

    async def on_push_block(self, block_id: str, records: list, num_records: int) -> None:
        await super().on_push_block(block_id, records, num_records)
        self.acked += num_records
        if self.acked >= self.expected and not self.done.is_set():
            self.spent.cpu_to()
            self.done.set()


class TimedKafkaReceiver(KafkaReceiver):
    """The Kafka receiver with its storing of fetched batches and its awaits of ``store_encoded``
    timed into ``spent`` (its fetch rounds are timed by the caller)."""

    def __init__(self, *args, spent: Spent, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.spent = spent

    async def _store_batches(self, tp, data, position, highwater, fetched_ms) -> None:
        with self.spent.part("store"):
            await super()._store_batches(tp, data, position, highwater, fetched_ms)

    async def store_encoded(self, piece, offsets, fetched_ms=None) -> None:
        with self.spent.part("store_wait"):
            await super().store_encoded(piece, offsets, fetched_ms)


def split_series(splits: dict[str, list[Spent]]) -> dict[str, dict[str, dict]]:
    """Per side and part, the series of seconds over the rounds."""
    return {
        side: {
            part: series([round_spent.get(part, 0.0) for round_spent in rounds], 3)
            for part in sorted({part for round_spent in rounds for part in round_spent})
        }
        for side, rounds in splits.items()
    }


def mean_push_ms(sup: ReceiverSupervisor) -> float:
    samples = {
        s.name: s.value
        for metric in sup.metrics.push_seconds.collect()
        for s in metric.samples
        if not s.labels.get("le")
    }
    count = samples.get("sluice_receiver_push_seconds_count", 0)
    return 1000 * samples.get("sluice_receiver_push_seconds_sum", 0) / count if count else 0.0
