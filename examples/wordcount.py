"""The tutorial's batch function: count the words of each batch and keep a running total.

    sluice-driver --app examples.wordcount:process ...     (from the repository's root)

``process`` runs on the driver once per batch; the counting runs in Spark tasks. The lambda below is
shipped to the tasks by value, so the Python workers need not import this file. The running total
lives in the driver process: it is what the tutorial checks, since the records of one produce call
may land in one batch or in two.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

totals: Counter[str] = Counter()


def process(batch: Any) -> None:
    """Print one line per batch that holds records: its size and the top words so far."""
    if batch.num_records == 0:
        return
    counts = batch.rdd.flatMap(lambda record: bytes(record.value).decode("utf-8", "replace").split()).countByValue()
    totals.update(counts)
    top = sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:3]
    words = ", ".join(f"{word} {count}" for word, count in top)
    print(f"batch {batch.time_ms}: {batch.num_records} records; top words so far: {words}", flush=True)
