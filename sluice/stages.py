"""Where a record's time goes: the wall-clock stamps of its way, and the stages they split it into.

A record passes: the broker's append (its Kafka timestamp), the receiver's fetch, the limiter's
admission, the block cut, the block store's write, the tracker's receipt of ``add_block``, the
driver's tick, the allocation's reply, the batch's submission, its job thread's start, the first
task's start (inside the Python task), the sink's end (``write_*``, when the function writes) and
the batch function's end.  Each stamp is wall-clock milliseconds of the machine that took it, so a
stage across two hosts includes their clock difference (on one machine, none).

Stamps are cheap: a block's records share every stamp from the cut on, and the ones before it are
kept for the block's first and last pieces only (:data:`FIRST`, :data:`LAST`), so a block carries
a few integers, not one per record.  The receiver and the tracker put them in the block's
``metadata`` under :data:`STAMPS` (optional: blocks of older receivers have none and yield no
samples); the driver adds the batch's own (:class:`BatchStamps`).  :func:`stage_samples` turns both
into durations per stage, two samples a block (its first and last records); pure, no clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sluice.block_info import ReceivedBlockInfo

MAX_STAMP_MS = 10**14  # as the tracker's bound on any time (sluice.tracker.wire.schema.MAX_TIME_MS)
STAMPS = "stamps"
"""The block ``metadata`` key of the block's stamps: a map of the names below to milliseconds."""

# per piece: [the block's first piece, its last piece]
APPEND = "append"  # the piece's Kafka timestamps: oldest record of the first, last record of the last
FETCH = "fetch"  # the piece reached the receiver (its Kafka fetch response arrived; else handed to the generator)
ADMIT = "admit"  # the limiter admitted it and it entered the block's buffer
FIRST, LAST = 0, 1
# per block
CUT = "cut"  # the block timer (or a flush) cut the buffer into the block
STORED = "stored"  # the block store's write returned
TRACKED = "tracked"  # the tracker took add_block (before its log write: the fsync is in allocation)

# per batch (BatchStamps' fields), in order
BATCH_POINTS = ("tick", "allocated", "submitted", "started", "task_start", "sink_end", "function_end")

#: The stages, in the order a record goes through them, with the stamps each runs between.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("broker", APPEND, FETCH),  # append -> fetched (the receiver's poll, the broker's fetch wait)
    ("limiter", FETCH, ADMIT),  # waiting for the rate limiter (and for room in the buffer), behind earlier pieces too
    ("buffer", ADMIT, CUT),  # waiting in the buffer for the block interval's end
    ("store", CUT, STORED),  # the block queue and the store's write
    ("report", STORED, TRACKED),  # add_block's trip to the tracker
    ("allocation_wait", TRACKED, "tick"),  # the tracker's log write, then waiting for the driver's tick
    ("allocate", "tick", "allocated"),  # allocate_blocks' round trip
    ("submit", "allocated", "submitted"),  # the block RDD built, the batch queued
    ("queue", "submitted", "started"),  # waiting for a job thread (Spark's scheduling delay)
    ("launch", "started", "task_start"),  # the function's own work until its first task ran
    ("task", "task_start", "sink_end"),  # the tasks until the sink's end (the function's end without one)
    ("finish", "sink_end", "function_end"),  # after the sink, until the function returned
)
STAGE_NAMES = tuple(name for name, _, _ in STAGES)


def now_ms() -> int:
    """Wall-clock milliseconds: the one clock a stamp is taken on, whatever process takes it."""
    return int(time.time() * 1000)


def _is_ms(value: Any) -> bool:
    return type(value) is int and value > 0


@dataclass
class BatchStamps:
    """The driver's stamps of one batch (wall-clock ms; None while not taken).  ``sink_end`` is
    the latest end of a ``write_*`` of the batch; without one the ``task`` stage runs to the
    function's end and ``finish`` is 0."""

    tick: int | None = None
    allocated: int | None = None
    submitted: int | None = None
    started: int | None = None
    task_start: int | None = None
    sink_end: int | None = None
    function_end: int | None = None

    def points(self) -> dict[str, int]:
        """The stamps taken, ``sink_end`` filled in from the function's end when no sink wrote."""
        out = {name: value for name in BATCH_POINTS if _is_ms(value := getattr(self, name))}
        if "sink_end" not in out and "function_end" in out:
            out["sink_end"] = out["function_end"]
        return out


@dataclass
class PieceStamps:
    """What a receiver notes of each piece it stores: kept for the block's first and last piece."""

    first: list[int] = field(default_factory=lambda: [0, 0, 0])  # append, fetch, admit
    last: list[int] = field(default_factory=lambda: [0, 0, 0])
    pieces: int = 0

    def add(self, fetch: int, admit: int, oldest: int = -1, newest: int = -1) -> None:
        """One piece stored, with its first and last records' Kafka timestamps (-1: none)."""
        if not self.pieces:
            self.first = [oldest, fetch, admit]
        self.last = [newest, fetch, admit]
        self.pieces += 1

    def block_stamps(self, cut: int) -> dict[str, Any]:
        """The :data:`STAMPS` map of the block these pieces went into, cut at ``cut``."""
        stamps: dict[str, Any] = {
            FETCH: [self.first[1], self.last[1]],
            ADMIT: [self.first[2], self.last[2]],
            CUT: cut,
        }
        if self.first[0] >= 0 and self.last[0] >= 0:
            stamps[APPEND] = [self.first[0], self.last[0]]
        return stamps


def stamped(info: ReceivedBlockInfo, name: str, ms: int) -> ReceivedBlockInfo:
    """``info`` with stamp ``name`` added to its :data:`STAMPS`; unchanged when it carries none
    (an older receiver's block, a source without stamps): stamps are kept only where they add up."""
    stamps = info.metadata.get(STAMPS)
    if not isinstance(stamps, Mapping):
        return info
    return replace(info, metadata={**info.metadata, STAMPS: {**stamps, name: ms}})


def check_stamps(stamps: Any) -> str | None:
    """What is wrong with a block's :data:`STAMPS` value, None if nothing: a map of names to
    milliseconds, or to ``[first, last]`` for the per-piece ones (the tracker refuses anything else,
    so the driver's arithmetic never meets a string)."""
    if not isinstance(stamps, Mapping):
        return f"must be a map of stamp names to milliseconds, got {type(stamps).__name__}"
    for name, value in stamps.items():
        values = value if isinstance(value, list) and len(value) == 2 else [value]
        if not all(type(v) is int and -1 <= v <= MAX_STAMP_MS for v in values):
            return (
                f"{name} = {value!r:.60} is not allowed: expected milliseconds since the epoch or [first, last] of them"
            )
    return None


def _record_points(stamps: Mapping[str, Any], which: int) -> dict[str, int]:
    """The block's first (``which`` = :data:`FIRST`) or last record's stamps, the block's own shared."""
    points: dict[str, int] = {}
    for name in (APPEND, FETCH, ADMIT):
        pair = stamps.get(name)
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and _is_ms(pair[which]):
            points[name] = pair[which]
    for name in (CUT, STORED, TRACKED):
        value = stamps.get(name)
        if isinstance(value, int) and _is_ms(value):
            points[name] = value
    return points


def stage_samples(blocks_metadata: Iterable[Mapping[str, Any] | None], batch: BatchStamps) -> dict[str, list[int]]:
    """Per stage, the durations (ms) of each block's first and last records in this batch.

    A stage whose two stamps a record lacks (an older receiver's block, a batch without a task)
    gets no sample from it; ``"total"`` is append -> the function's end, for a record with both.
    """
    shared = batch.points()
    samples: dict[str, list[int]] = {name: [] for name in (*STAGE_NAMES, "total")}
    for metadata in blocks_metadata:
        stamps = metadata.get(STAMPS) if metadata else None
        if not isinstance(stamps, Mapping):
            continue
        for which in (FIRST, LAST):
            points = {**_record_points(stamps, which), **shared}
            for name, start, end in STAGES:
                if start in points and end in points:
                    samples[name].append(points[end] - points[start])
            if APPEND in points and "function_end" in points:
                samples["total"].append(points["function_end"] - points[APPEND])
    return samples


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank, as the benches count), which is not empty."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stage_percentiles(samples: Mapping[str, Sequence[float]]) -> dict[str, dict[str, float]]:
    """``{stage: {"p50": ms, "p99": ms}}`` of the stages that have samples, in the stages' order."""
    return {
        name: {"p50": float(percentile(values, 0.5)), "p99": float(percentile(values, 0.99))}
        for name, values in samples.items()
        if values
    }
