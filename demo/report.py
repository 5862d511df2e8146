"""What the demo shows: a live table per batch, the closing summary and the PNG chart.

Kept apart from the orchestration so the arithmetic (none lost, batches to steady state) is plain
functions over recorded rows, testable without a pipeline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO


@dataclass
class BatchRow:
    """One completed batch as the demo saw it (``t``: seconds since the load started)."""

    t: float
    batch_time_ms: int
    records: int
    rate_limit: float | None
    processing_ms: int
    scheduling_ms: int
    top_words: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class Series:
    """Everything recorded during the run."""

    interval_ms: int
    batches: list[BatchRow] = field(default_factory=list)
    offered: list[tuple[float, float]] = field(default_factory=list)  # (t, offered records/s)
    rate_limit: list[tuple[float, float]] = field(default_factory=list)  # (t, published rate)
    step: tuple[float, float] | None = None  # (start, end) of the high-load phase


HEADER = f"{'t (s)':>6} {'batch':>8} {'records':>8} {'rate limit':>11} {'proc ms':>8} {'sched ms':>9}  top words"


def format_row(row: BatchRow) -> str:
    limit = "none" if row.rate_limit is None else f"{row.rate_limit:,.0f}/s"
    words = ", ".join(f"{w} {c}" for w, c in row.top_words) or "-"
    batch = time.strftime("%H:%M:%S", time.localtime(row.batch_time_ms / 1000))
    return (
        f"{row.t:6.1f} {batch:>8} {row.records:8d} {limit:>11} {row.processing_ms:8d} {row.scheduling_ms:9d}  {words}"
    )


class LiveTable:
    """The live table: one line per batch, the header again every ``every`` lines."""

    def __init__(self, out: TextIO, every: int = 20) -> None:
        self.out, self.every, self.rows = out, every, 0

    def add(self, row: BatchRow) -> None:
        if self.rows % self.every == 0:
            print(HEADER, file=self.out)
        self.rows += 1
        print(format_row(row), file=self.out, flush=True)


def batches_to_steady(
    rows: Sequence[BatchRow], step: tuple[float, float] | None, interval_ms: int, run: int = 3
) -> int | None:
    """Batches after the load step until the driver keeps up for the rest of the high load.

    Keeping up: scheduling delay at most one batch interval and processing time at most 1.5
    intervals, the PID estimator's fixed point with the slack a shared machine needs.
    Counted from the step to the first batch from which every batch of the high-load phase keeps up
    (at least ``run`` of them); None when there was no step or it never settled.
    """
    if step is None:
        return None
    start, end = step
    during = [r for r in rows if start <= r.t < end]
    ok = [r.scheduling_ms <= interval_ms and r.processing_ms <= 1.5 * interval_ms for r in during]
    for i in range(len(ok) - run + 1):
        if all(ok[i:]):
            return i
    return None


@dataclass
class Summary:
    batches: int
    records_in: int
    records_processed: int
    distinct: int
    duplicates: int
    missing: int
    batches_to_steady: int | None
    peak_scheduling_delay_ms: int
    drained: bool

    @property
    def none_lost(self) -> bool:
        return self.missing == 0 and self.duplicates == 0 and self.records_processed == self.records_in


def summarize(
    series: Series, records_in: int, seen: Sequence[int] | set[int], duplicates: int, drained: bool
) -> Summary:
    """``seen``: the distinct sequence numbers processed; a record is missing if its number is not."""
    distinct = len(seen)
    missing = sum(1 for s in range(records_in) if s not in seen) if isinstance(seen, set) else records_in - distinct
    return Summary(
        batches=len(series.batches),
        records_in=records_in,
        records_processed=sum(r.records for r in series.batches),
        distinct=distinct,
        duplicates=duplicates,
        missing=missing,
        batches_to_steady=batches_to_steady(series.batches, series.step, series.interval_ms),
        peak_scheduling_delay_ms=max((r.scheduling_ms for r in series.batches), default=0),
        drained=drained,
    )


def format_summary(s: Summary) -> str:
    steady = "not reached" if s.batches_to_steady is None else f"{s.batches_to_steady}"
    if s.none_lost:
        lost = "none lost"
    elif s.drained:
        lost = f"{s.missing} lost, {s.duplicates} duplicated"
    else:  # the rest is still in Kafka: it is late, not lost
        lost = f"{s.missing} not processed before the drain timeout, {s.duplicates} duplicated"
    return "\n".join(
        [
            "summary",
            f"  batches                        {s.batches}",
            f"  records in (acked by Kafka)    {s.records_in}",
            f"  records processed              {s.records_processed} ({s.distinct} distinct): {lost}",
            f"  batches to steady after step   {steady}",
            f"  peak scheduling delay          {s.peak_scheduling_delay_ms} ms",
            *([] if s.drained else ["  the backlog was not fully drained before the drain timeout"]),
        ]
    )


def write_outputs(series: Series, summary: Summary, output: Path) -> Path:
    """summary.json, batches.json and the chart; returns the chart's path."""
    output.mkdir(parents=True, exist_ok=True)
    (output / "summary.json").write_text(json.dumps({**asdict(summary), "none_lost": summary.none_lost}, indent=2))
    (output / "batches.json").write_text(json.dumps([asdict(r) for r in series.batches]))
    return draw_chart(series, output / "sluice-demo.png")


def draw_chart(series: Series, path: Path) -> Path:
    """Offered load, rate limit and processed rate over time; scheduling delay over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 7), height_ratios=(3, 2))
    if series.offered:
        top.step(*zip(*series.offered), where="post", label="offered load", color="tab:gray")
    if series.rate_limit:
        top.step(*zip(*series.rate_limit), where="post", label="rate limit", color="tab:red")
    interval_s = series.interval_ms / 1000
    if series.batches:
        top.plot(
            [r.t for r in series.batches],
            [r.records / interval_s for r in series.batches],
            marker=".",
            label="processed rate (records per batch / interval)",
            color="tab:blue",
        )
        bottom.plot(
            [r.t for r in series.batches],
            [r.scheduling_ms / 1000 for r in series.batches],
            marker=".",
            label="scheduling delay",
            color="tab:orange",
        )
        bottom.plot(
            [r.t for r in series.batches],
            [r.processing_ms / 1000 for r in series.batches],
            marker=".",
            label="processing time",
            color="tab:green",
            alpha=0.6,
        )
    bottom.axhline(interval_s, linestyle="--", color="black", linewidth=0.8, label="batch interval")
    if series.step is not None:
        for ax in (top, bottom):
            ax.axvspan(*series.step, color="tab:gray", alpha=0.08, label=None)
    top.set_ylabel("records/s")
    top.set_title("Sluice backpressure: the rate limit follows what the driver can process")
    bottom.set_ylabel("seconds")
    bottom.set_xlabel("seconds since the load started")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
