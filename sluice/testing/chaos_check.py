"""The fault campaign's checker: what the output proves once every fault has healed.

The topic itself is the truth: an id the producer sent without an acknowledgement may or may not
be there, and a producer retry may have put one twice.  So a record is a ``(partition, offset)``
of the topic, and the sink's output must hold each one exactly once; an id the broker
acknowledged must be in the output too.  The producer is neither transactional nor on a compacted
topic, so a partition's offsets are dense: the topic's records are every offset below its end, and
the checker needs only the end offsets, not a read of the topic back (through a broker that keeps
its log on S3, one object a producer batch, that read ran at a few records a second).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Batch", "check", "percentile", "read_output", "recoveries", "rss_growth"]


@dataclass(frozen=True)
class Batch:
    """One published batch: its time, when its output was in place, its rows ``(partition, offset, id, ts)``."""

    time_ms: int
    published: float
    rows: tuple[tuple[int, int, int, int], ...]


def read_output(out: Path) -> list[Batch]:
    """The batches the idempotent sink published (``batch_time=<t>/``; hidden temporaries skipped)."""
    batches = []
    for directory in out.glob("batch_time=*"):
        success = directory / "_SUCCESS"
        if not success.exists():
            continue
        rows = tuple(
            (row["partition"], row["offset"], row["id"], row["ts"])
            for part in sorted(directory.glob("part-*"))
            for row in map(json.loads, part.read_text().splitlines())
        )
        batches.append(Batch(int(directory.name.split("=")[1]), success.stat().st_mtime, rows))
    return sorted(batches, key=lambda b: b.time_ms)


def check(
    ends: Mapping[int, int],
    acked: Iterable[int],
    batches: Sequence[Batch],
    taken: Mapping[int, int] | None = None,
    holes: Iterable[tuple[int, int]] = (),
) -> dict:
    """Lost, duplicated and out-of-order records of the output against the topic's end offsets.

    ``ends`` maps each partition to its end offset once the producer stopped; ``acked`` holds the
    ids the broker acknowledged.  Lost: the offsets below their partition's end that the output
    lacks, or, when more, the acknowledged ids the output lacks (an id is at one offset, so the
    larger count bounds the loss from below and is exact when either is zero).  ``taken`` (for an
    output that did not drain) maps each partition to the receivers' committed offset: a missing
    offset at or past it was never taken from Kafka, so it is ``not_taken`` (a backlog, still in the
    topic), not lost; a receiver commits only what the tracker holds, so one below it is lost or
    still queued.  ``beyond_end`` counts output records at or past their partition's end (none,
    unless the end offsets were wrong); ``topic_duplicates`` ids the producer's retries put twice.
    ``holes`` are ``(partition, offset)`` pairs a read of the topic found no record at (a broker
    restarted mid-write may leave offsets with no record): not records, so never lost.
    """
    seen = Counter((p, o) for b in batches for p, o, _, _ in b.rows)
    out_ids = {i for b in batches for _, _, i, _ in b.rows}
    absent = set(holes) - seen.keys()
    records = {(p, o) for p, end in ends.items() for o in range(end)} - absent
    missing = records - seen.keys()
    backlog = {(p, o) for p, o in missing if taken is not None and o >= taken.get(p, 0)}
    # A partition's offsets never go back from one batch to a later one.
    order, last = 0, dict[int, int]()
    for batch in batches:
        first: dict[int, int] = {}
        for p, o, _, _ in batch.rows:
            first[p] = min(first.get(p, o), o)
        order += sum(1 for p, o in first.items() if o <= last.get(p, -1))
        for p, o, _, _ in batch.rows:
            last[p] = max(last.get(p, -1), o)
    return {
        "records": len(records | seen.keys()),
        # an acknowledged id missing from the output is most often at a missing offset, counted
        # already; only those beyond the missing offsets are records the topic itself lacks
        "lost": max(len(missing - backlog), len(set(acked) - out_ids) - len(backlog)),
        "not_taken": len(backlog),
        "duplicated": sum(n - 1 for n in seen.values()),
        "order_violations": order,
        "beyond_end": len(seen.keys() - records),
        "topic_duplicates": len(seen) - len(out_ids),
        "topic_holes": len(absent),
    }


def recoveries(heals: Iterable[float], batches: Sequence[Batch], until: float) -> list[float]:
    """For each healing before ``until`` (the last record's time): seconds to the first published
    batch holding a record produced after it."""
    out = []
    for healed in sorted(heals):
        if healed >= until:
            continue
        after = [
            b.published for b in batches if b.published >= healed and any(ts >= healed * 1000 for *_, ts in b.rows)
        ]
        if after:
            out.append(min(after) - healed)
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by the nearest rank; ``None`` for no value."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


#: A process restarted in the second half is judged from this long after its start (a JVM's heap
#: and Python's caches grow for the first minutes), and only if that leaves a third of the half.
WARMUP_S = 120.0


def rss_growth(samples: Sequence[tuple[float, str, int, int]], start: float, end: float) -> dict[str, float | None]:
    """Per service, % growth of its RSS over ``[start + (end - start) / 2, end]``: the median of the
    last fifth of a span against the median of its first fifth.  The span is the longest any one
    process of the service lived in that half (counted from :data:`WARMUP_S` after its start for
    one started in the half): the whole half for a process that lived through it.  ``None`` when
    no span covers a third of the half (restarted there, and killed again or still warming up)."""
    middle = start + (end - start) / 2
    born: dict[tuple[str, int], float] = {}  # each process's first sample
    for t, s, pid, _ in samples:
        born.setdefault((s, pid), t)
    spans: dict[str, dict[int, list[tuple[float, int]]]] = {}
    for t, s, pid, rss in samples:
        since = born[(s, pid)]
        if t >= middle and t >= since + (WARMUP_S if since > middle else 0.0):
            spans.setdefault(s, {}).setdefault(pid, []).append((t, rss))
    growth: dict[str, float | None] = {}
    for service in sorted({s for _, s, _, _ in samples}):
        span = max((spans.get(service) or {}).values(), key=lambda x: x[-1][0] - x[0][0], default=[])
        if len(span) < 10 or span[-1][0] - span[0][0] < (end - middle) / 3:
            growth[service] = None
            continue
        fifth = max(1, len(span) // 5)
        before = statistics.median(r for _, r in span[:fifth])
        after = statistics.median(r for _, r in span[-fifth:])
        growth[service] = round(100 * (after - before) / before, 1)
    return growth
