"""The demo's batch function: a word count over Kafka records ``"<seq> <words...>"``.

Each Spark task counts the words of its block and returns the counts and the sequence numbers it
saw; the driver merges them. One job per batch (no shuffle) keeps the per-batch overhead low on a
small machine, and the sequence numbers let the demo check that every record offered was processed
exactly once. ``cost_us`` adds a fixed cost per record (a sleep, so it costs no CPU) to give the
driver a known capacity: with ``local[2]`` about ``2 / cost`` records/s, minus Spark's per-batch
overhead. That is what makes the demo's step above capacity visible on any machine.

``word_count`` is also a ready ``--app`` for ``sluice-driver`` (``sluice.demo.app:word_count``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class BatchResult:
    """What one batch held: record count, word counts and the sequence numbers seen."""

    records: int = 0
    words: Counter = field(default_factory=Counter)
    seqs: list[int] = field(default_factory=list)
    bad: int = 0  # records whose value did not start with a sequence number

    def top(self, n: int = 3) -> list[tuple[str, int]]:
        return self.words.most_common(n)


def _value_text(record: Any) -> str:
    value = getattr(record, "value", record)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def count_partition(records: Iterable[Any], cost_us: float = 0.0) -> Iterator[tuple[int, dict, list[int], int]]:
    """Runs in a Spark task: (records, word counts, sequence numbers, unparseable) of one block."""
    words: Counter = Counter()
    seqs: list[int] = []
    n = bad = 0
    for record in records:
        n += 1
        seq, _, text = _value_text(record).partition(" ")
        try:
            seqs.append(int(seq))
        except ValueError:
            bad += 1
            text = f"{seq} {text}"
        words.update(text.split())
    if cost_us > 0 and n:
        time.sleep(n * cost_us / 1e6)
    yield n, dict(words), seqs, bad


def process_batch(batch: Any, cost_us: float = 0.0) -> BatchResult:
    """Count one batch's words in one Spark job and merge the per-block results on the driver."""
    result = BatchResult()
    for n, words, seqs, bad in batch.rdd.mapPartitions(partial(count_partition, cost_us=cost_us)).collect():
        result.records += n
        result.words.update(words)
        result.seqs.extend(seqs)
        result.bad += bad
    return result


def _warm_partition(items: Iterable[Any]) -> Iterator[int]:
    import sluice.storage.block_store  # noqa: F401 - what each task of a real batch imports first

    yield sum(n for n, *_ in count_partition(items))


def warm_up(spark_context: Any, slots: int = 2) -> None:
    """Start the Python workers and import what the tasks use before the first batch.

    The first job otherwise pays seconds of worker start-up and imports, which the estimator would
    read as a capacity collapse before the load has even begun.
    """
    spark_context.parallelize([f"{i} warm up" for i in range(slots * 4)], slots).mapPartitions(_warm_partition).sum()


def word_count(batch: Any) -> None:
    """``sluice-driver --app sluice.demo.app:word_count``: log each batch's top words."""
    result = process_batch(batch)
    log.info(
        "batch %d: %d records, top words %s",
        batch.time_ms,
        result.records,
        ", ".join(f"{w} {c}" for w, c in result.top(5)) or "-",
    )
