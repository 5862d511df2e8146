"""What only the benchmarks share: a topic full of records, the ratio of medians, a profiler on
request, and one JSON line of figures per benchmark.

Run a benchmark as ``.venv/bin/python bench/<name>.py``: Python puts ``bench/`` first on the
path, so ``import harness`` finds this module, and Sluice is installed (``make install``), so
everything else is ``sluice.*``.  Processes (the broker, the tracker, receivers) are started with
:mod:`sluice.processes`, the same helpers the tests and the demo use.

Benchmarks measure from outside: wall time around a whole run, ratios against a peer measured in
the same run.  Where a figure needs the inside of the pipeline, ``--profile FILE`` runs the
measured part under :mod:`cProfile` instead of counters in the per-block path.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sluice.processes import create_topic


async def produce(bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int = 100) -> None:
    """Create ``topic`` and fill it with ``records`` numbered records spread evenly over its partitions.

    Record ``i`` has the key ``i % 1000`` and a value starting with ``i`` (nine digits), padded to
    ``value_bytes``.  Records go in whole producer batches, so producing is not what is measured.
    """
    from aiokafka import AIOKafkaProducer

    await create_topic(bootstrap, partitions, topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    padding = b"x" * max(0, value_bytes - 9)
    futures, i = [], 0
    try:
        while i < records:
            for partition in range(partitions):
                batch = producer.create_batch()
                while i < records and batch.append(key=b"%d" % (i % 1000), value=b"%09d" % i + padding,
                                                   timestamp=None) is not None:
                    i += 1
                batch.close()
                futures.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def ratio_of_medians(ours: Sequence[float], peer: Sequence[float]) -> float:
    return statistics.median(ours) / statistics.median(peer)


@contextmanager
def profiled(path: Path | None) -> Iterator[None]:
    """Profile the block with cProfile into ``path`` (``python -m pstats path`` reads it); nothing if None."""
    if path is None:
        yield
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(path)
        print(f"profile written to {path}")


def report(bench: str, **figures: Any) -> None:
    """The benchmark's figures as one JSON line (the last line it prints)."""
    print(json.dumps({"bench": bench, **figures}, default=str))
