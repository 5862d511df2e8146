"""What the demo shows: a live table per batch, the closing summary and the PNG chart.

Kept apart from the orchestration so the arithmetic (none lost, batches to steady state, what the
controller did against what the driver could do) is plain functions over recorded rows, testable
without a pipeline.
"""

from __future__ import annotations

import json
import statistics
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
    offered: float = 0.0  # records/s the load generator offered during the batch's interval


@dataclass
class Series:
    """Everything recorded during the run."""

    interval_ms: int
    batches: list[BatchRow] = field(default_factory=list)
    offered: list[tuple[float, float]] = field(default_factory=list)  # (t, offered records/s)
    rate_limit: list[tuple[float, float]] = field(default_factory=list)  # (t, published rate)
    step: tuple[float, float] | None = None  # (start, end) of the high-load phase


HEADER = (
    f"{'t (s)':>6} {'batch':>8} {'records':>8} {'offered':>9} {'rate limit':>11} {'proc ms':>8} {'sched ms':>9}"
    "  top words"
)


def format_row(row: BatchRow) -> str:
    limit = "none" if row.rate_limit is None else f"{row.rate_limit:,.0f}/s"
    offered = f"{row.offered:,.0f}/s"
    words = ", ".join(f"{w} {c}" for w, c in row.top_words) or "-"
    batch = time.strftime("%H:%M:%S", time.localtime(row.batch_time_ms / 1000))
    return (
        f"{row.t:6.1f} {batch:>8} {row.records:8d} {offered:>9} {limit:>11} {row.processing_ms:8d} "
        f"{row.scheduling_ms:9d}  {words}"
    )


def format_step(t: float, before: float, after: float) -> str:
    """The line the table prints where the offered load changes."""
    change = "ends" if after == 0 else "steps up" if after > before else "steps down"
    return f"{'':6} ---- {t:.1f} s: the offered load {change}, {before:,.0f}/s -> {after:,.0f}/s ----"


class LiveTable:
    """The live table: one line per batch, a line at each load step, the header every ``every`` rows.

    :param steps: ``(t, from, to)`` of each change of the offered load
        (:meth:`~sluice.demo.profile.Profile.steps`); its line goes before the first batch after it.
    """

    def __init__(self, out: TextIO, steps: Sequence[tuple[float, float, float]] = (), every: int = 20) -> None:
        self.out, self.every, self.rows = out, every, 0
        self.steps = list(steps)

    def add(self, row: BatchRow) -> None:
        if self.rows % self.every == 0:
            print(HEADER, file=self.out)
        self.rows += 1
        while self.steps and self.steps[0][0] < row.t:
            print(format_step(*self.steps.pop(0)), file=self.out)
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
class Control:
    """The high-load phase: what was offered, what the controller set, what the driver could do.

    ``capacity`` is the driver's own measure: records per second of processing time over the
    phase's batches with records, whatever the rate limit let in. (Records per batch interval would
    not do: a batch that takes longer than its interval still holds one interval's records.)
    """

    step_at: float
    offered_before: float
    offered_step: float
    limit_before: float | None
    limit_settled: float | None  # median over the phase's second half
    capacity: float | None


def control(rows: Sequence[BatchRow], step: tuple[float, float] | None) -> Control | None:
    """The high-load phase's :class:`Control`; None without a step or without a batch in it."""
    if step is None:
        return None
    start, end = step
    before = [r for r in rows if r.t <= start]
    during = [r for r in rows if start < r.t <= end]
    if not during:
        return None
    settled = during[len(during) // 2 :]
    limits = [r.rate_limit for r in settled if r.rate_limit is not None]
    busy = [r for r in during if r.records and r.processing_ms]
    return Control(
        step_at=start,
        offered_before=before[-1].offered if before else 0.0,
        offered_step=max(r.offered for r in during),
        limit_before=before[-1].rate_limit if before else None,
        limit_settled=statistics.median(limits) if limits else None,
        capacity=sum(r.records for r in busy) / sum(r.processing_ms / 1000 for r in busy) if busy else None,
    )


def describe_control(c: Control) -> list[tuple[str, str]]:
    """What the controller did and how close the rate came to capacity, in words (label, text)."""
    lines = [("load step", f"{c.offered_before:,.0f}/s -> {c.offered_step:,.0f}/s offered at {c.step_at:.1f} s")]
    if c.limit_settled is None:
        return [*lines, ("controller", "published no rate limit during the step")]
    if c.limit_before is None or abs(c.limit_settled - c.limit_before) <= 0.05 * c.limit_before:
        moved = f"kept the rate limit near {c.limit_settled:,.0f}/s"
    else:
        verb = "lowered" if c.limit_settled < c.limit_before else "raised"
        moved = f"{verb} the rate limit from {c.limit_before:,.0f}/s to {c.limit_settled:,.0f}/s"
    if c.limit_settled < c.offered_step:
        share = c.limit_settled / c.offered_step
        waited = f"{share:.0%} of the offered load; the other {c.offered_step - c.limit_settled:,.0f}/s waited in Kafka"
    else:
        waited = "at or above the offered load, so nothing had to wait"
    lines.append(("controller", f"{moved}: {waited}"))
    if c.capacity is not None:
        share = c.limit_settled / c.capacity
        if share > 1.1:
            verdict = "above it, so batches queued"
        elif share < 0.8 and c.limit_settled < c.offered_step:
            verdict = "below it: the estimator held back more than needed"
        elif share < 0.8:
            verdict = "with room to spare"
        else:
            verdict = "close to it"
        lines.append(
            (
                "capacity",
                f"the driver's processing time says it could do about {c.capacity:,.0f}/s; "
                f"the rate limit settled at {share:.0%} of that, {verdict}",
            )
        )
    return lines


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
    control: Control | None = None

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
        control=control(series.batches, series.step),
    )


def format_summary(s: Summary) -> str:
    if s.control is None:
        steps = [("load step", "none: the offered load never stepped up")]
    else:
        steps = describe_control(s.control)
        if s.batches_to_steady is None:
            steps.append(("kept up", "not during the step: scheduling delay or processing time stayed over budget"))
        else:
            nth = "the first batch" if s.batches_to_steady == 0 else f"batch {s.batches_to_steady + 1}"
            steps.append(("kept up", f"from {nth} of the step on (scheduling delay within one interval)"))
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
            *(f"  {label:<30} {text}" for label, text in steps),
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
    # matplotlib (the demo extra) loads only to draw the plots
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"), so no display is needed

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
