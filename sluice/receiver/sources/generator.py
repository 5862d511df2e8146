"""``GeneratorReceiver``: synthetic records for the demo and the benchmarks.

Each record is a line ``"<tag>:<seq> <word> <word> ..."``: the sequence number is unique per
generator (``tag`` defaults to the receiver id) and increases by one, so a consumer can check that
none was lost or doubled; the words come from a fixed vocabulary in a deterministic order, so a
word count has a known answer.  ``rate`` is the rate *offered* (0: as fast as the receiver's
limiter lets records in); the receiver's limiter still applies on top.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from sluice.clock import Clock
from sluice.errors import InvalidArgument
from sluice.receiver.rate_limiter import RateLimiter
from sluice.receiver.receiver import Receiver

VOCABULARY = (
    "spark",
    "stream",
    "block",
    "batch",
    "receiver",
    "tracker",
    "rate",
    "backpressure",
    "kafka",
    "offset",
    "driver",
    "estimator",
    "sluice",
    "window",
    "record",
    "python",
)


def words_of(seq: int, count: int) -> list[str]:
    """The words of record ``seq`` (pure, so tests and the demo can predict counts)."""
    n = len(VOCABULARY)
    return [VOCABULARY[(seq * 7 + k * 3) % n] for k in range(count)]


def make_record(tag: str, seq: int, words: int) -> str:
    return f"{tag}:{seq} " + " ".join(words_of(seq, words))


class GeneratorReceiver(Receiver):
    """Numbered synthetic records (see the module docstring), offered at ``rate``.

    :param rate: records/s offered; 0: as fast as the receiver's limiter admits.
    :param batch_size: records per ``store_many``.
    :param words_per_record: words after the sequence number.
    :param total: stop after this many records; ``None``: never.
    :param tag: the prefix of every record; default the receiver id.
    :param clock: paces the offered rate (default the supervisor's clock).
    """

    def __init__(
        self,
        rate: float = 0.0,
        *,
        batch_size: int = 100,
        words_per_record: int = 3,
        total: int | None = None,
        tag: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise InvalidArgument(f"batch_size must be at least 1, got {batch_size}")
        self.rate = rate
        self.batch_size = batch_size
        self.words_per_record = words_per_record
        self.total = total
        self.tag = tag
        self.clock = clock
        self.next_seq = 0  # survives restarts: a restarted generator goes on, it does not repeat

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> GeneratorReceiver:
        """The ``generator`` source's factory: the receiver the ``[generator]`` section describes."""
        return cls(
            options["rate"],
            batch_size=options["batch_size"],
            words_per_record=options["words_per_record"],
            total=options["total"] or None,
        )

    async def on_start(self) -> None:
        self.spawn(self._generate(), name=f"generator-{self.receiver_id}")

    async def _generate(self) -> None:
        tag = self.tag or self.receiver_id
        pace = RateLimiter(rate=self.rate, clock=self.clock or self.supervisor.clock) if self.rate > 0 else None
        words = self.words_per_record
        while self.total is None or self.next_seq < self.total:
            count = self.batch_size if self.total is None else min(self.batch_size, self.total - self.next_seq)
            if pace is not None:
                await pace.acquire(count)
            start = self.next_seq
            batch = [make_record(tag, seq, words) for seq in range(start, start + count)]
            await self.store_many(batch)
            self.next_seq = start + count
            await asyncio.sleep(0)  # an unlimited limiter never suspends: let timers and I/O run
