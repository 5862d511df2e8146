"""Rate control on the real pipeline: scenario by scenario, Spark's PID, Sluice's PID and ``adaptive``.

    .venv/bin/python bench/control.py [--quick] [--rounds N] [--scenarios a,b] [--estimators pid,adaptive]

Each scenario (below) runs every estimator ``--rounds`` times (5 by default), scenario after
scenario within a repetition, alternating whether the PID or ``adaptive`` goes first (Spark's
run moves through the three places).  Every run is the real thing (``bench/control_runs.py``):
receiver, tracker and driver processes, or Spark's own receiver with its PID backpressure on the
same socket workload and the same batch function.  The figures are the arena's, computed from
what the systems reported (``figures``).  Stdout gets one JSON object per scenario x estimator
(per figure the median, min and max over the runs, each run, ``ratio`` of our median over the
peer's: Spark's PID where it ran, else Sluice's PID) and a last line with the whole bench's
figures; stderr gets each run as it ends and a Markdown table of medians (lowest-highest).

The cold starts (``cold_0.1x``, ``cold_1x``, ``cold_10x``) start from an initial rate of 0.1, 1 and
10 times capacity (offered 20,000/s for the last: the socket serves at most that, so Spark's first
batches hold 4x capacity, not 10x).  The full run is 9 scenarios x 3 estimators (Kafka: 2) x 5
repetitions of 8-14 s of 500 ms batches each, plus start-up: about 35 minutes on a 2-core
machine.  ``--quick`` runs each once, shorter: a smoke run, not evidence.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from control_runs import Run, Setup, run_sluice, run_spark
from control_workload import Workload
from harness import fields_figure, options, parser, produce, report, say, spark_session

from sluice.testing.arena.metrics import verdict as arena_verdict
from sluice.testing.arena.model import Periodic, Steps

INTERVAL_MS = 500
BLOCK_MS = 100
MIN_RATE = 100.0  # Spark's pid.minRate, the PID's floor
BAND = 0.10  # the arena's steady band: processing within 10 % of the interval
COST_MS = 0.2  # per record at speed 1: 5,000 records/s, 2,500 a batch (less overhead)
SPARK = "spark-pid"
FIELDS = ("batches_to_steady", "peak_scheduling_delay_intervals", "batches_at_min_rate", "steady_utilization")


@dataclass(frozen=True)
class Scenario:
    """A workload and a capacity profile; ``steps_s``: when capacity steps (the steady clocks restart)."""

    name: str
    description: str
    setup: Setup
    steps_s: tuple[float, ...] = ()
    kafka: bool = False  # the source: a Kafka topic with a backlog, else lines from a socket

    @property
    def peer(self) -> bool:
        return not self.kafka  # Spark's own receiver runs the socket workload (PySpark has no Kafka DStream)


def _setup(
    seconds: float,
    *,
    initial_rate: float,
    offered: float = 15_000.0,
    workload: Workload | None = None,
    profile: Callable[[float], float] = lambda t: 1.0,
) -> Setup:
    return Setup(INTERVAL_MS, BLOCK_MS, seconds, offered, initial_rate, workload or Workload(COST_MS), profile)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "kafka_backlog",
            "Kafka topic with a backlog larger than the run reads; initial rate 2x capacity",
            _setup(13, initial_rate=10_000.0),
            kafka=True,
        ),
        Scenario(
            "step",
            "capacity drops to 60 % at 3 s and comes back at 8 s (the batch function's cost changes)",
            _setup(14, initial_rate=5_000.0, profile=Steps(1.0, ((3.0, 0.6), (8.0, 1.0)))),
            (3.0, 8.0),
        ),
        Scenario(
            "cliff",
            "past 1,500 records a batch spills: each further record costs 5x (capacity ~4,400/s, "
            "the linear part suggests 10,000/s); initial rate 3,000/s",
            _setup(13, initial_rate=3_000.0, workload=Workload(0.1, cliff_records=1_500, cliff_factor=5.0)),
        ),
        Scenario(
            "cold_start",
            "no initial rate: the first batch takes what the socket offers (15,000/s)",
            _setup(13, initial_rate=0.0),
        ),
        Scenario(
            "cold_start_rate",
            "initial rate 20,000/s, 4x capacity (the measured Spark case), offered 20,000/s",
            _setup(13, initial_rate=20_000.0, offered=20_000.0),
        ),
        *(
            Scenario(
                f"cold_{label}",
                f"initial rate {factor:g}x capacity ({5_000 * factor:,.0f}/s), offered {offered:,.0f}/s: the "
                "goals are a peak scheduling delay of 2 intervals at most, steady within 5 batches, no batch "
                "at the minimum rate",
                _setup(8, initial_rate=5_000.0 * factor, offered=offered),
            )
            for label, factor, offered in (("0.1x", 0.1, 15_000.0), ("1x", 1.0, 15_000.0), ("10x", 10.0, 20_000.0))
        ),
        Scenario(
            "periodic",
            "capacity follows a 12 s cycle, +-30 %",
            _setup(14, initial_rate=5_000.0, profile=Periodic(1.0, 0.3, 12.0)),
        ),
    )
}


# -- the figures of one run (the arena's definitions, on what the system reported) ---------------


def _steady_from(in_band: list[bool], start: int, end: int) -> int | None:
    """First position in [start, end) from which every batch to ``end`` is in band (None: never)."""
    first = None
    for i in range(end - 1, start - 1, -1):
        if not in_band[i]:
            break
        first = i
    return first


def figures(run: Run, scenario: Scenario) -> dict[str, Any]:
    """Batches to steady (after each step, the worst), peak scheduling delay (queued batches
    at the end included), batches at the minimum rate (empty ones included), steady utilization."""
    setup, interval = scenario.setup, float(scenario.setup.interval_ms)
    first = next((i for i, b in enumerate(run.batches) if b.records > 0), None)
    if first is None:
        raise RuntimeError(f"{scenario.name}/{run.estimator}: no batch held records")
    batches = run.batches[first:]
    overheads = [b.processing_ms - b.slept_ms for b in batches if b.records > 0]
    overhead = statistics.median(overheads)
    capacity = [setup.workload.capacity_records(interval - overhead, b.speed) for b in batches]
    in_band = [b.scheduling_ms < interval and abs(b.processing_ms - interval) <= BAND * interval for b in batches]
    references = [0] + [
        next((i for i, b in enumerate(batches) if b.start_ms >= t * 1000), len(batches)) for t in scenario.steps_s
    ]
    ends = references[1:] + [len(batches)]
    segments = references[1:] if scenario.steps_s else references
    steady_at = {ref: _steady_from(in_band, ref, end) for ref, end in zip(references, ends)}
    to_steady = [None if (at := steady_at[ref]) is None else at - ref for ref in segments]
    last = steady_at[references[-1]]
    window = range(last, len(batches)) if last is not None else range(len(batches) // 2, len(batches))
    possible = sum(capacity[i] for i in window)
    useful = sum(min(batches[i].records, capacity[i]) for i in window)
    delays = [b.scheduling_ms for b in batches] + run.unfinished_delays_ms
    after = [b.scheduling_ms for b in batches if scenario.steps_s and b.batch_ms >= scenario.steps_s[0] * 1000]
    at_min = MIN_RATE * interval / 1000 * (1 + BAND)
    return {
        "batches_to_steady": None if None in to_steady else max(t for t in to_steady if t is not None),
        "peak_scheduling_delay_intervals": round(max(delays) / interval, 2),
        "batches_at_min_rate": sum(1 for b in batches if b.records <= at_min),
        "steady_utilization": round(useful / possible, 3) if possible > 0 else 0.0,
        "steady_per_step": to_steady if scenario.steps_s else None,
        "peak_delay_after_change_intervals": (
            round(max(after + run.unfinished_delays_ms) / interval, 2) if scenario.steps_s else None
        ),
        "in_band": round(sum(in_band) / len(in_band), 3),
        "peak_tracker_wait_intervals": (
            round(max(waits) / interval, 2)
            if (waits := [b.block_age_ms - interval for b in batches if b.block_age_ms is not None])
            else None
        ),
        "batches": len(batches),
        "overhead_ms": round(overhead),
        "load": run.load,
        "records": [b.records for b in batches],
    }


# -- medians and spread over the runs ---------------------------------------------------------------


def verdict(ours: dict[str, Any], pid: dict[str, Any]) -> dict[str, str]:
    """Per figure, ``win``/``tie``/``loss`` of our median against Sluice's PID's, with the arena's
    ties (``sluice.testing.arena.metrics.TIES``)."""
    return arena_verdict(ours["median"], pid["median"])


def _cell(value: Any, spread: list[Any], fmt: str) -> str:
    show = lambda v: "never" if v is None else fmt.format(v)  # noqa: E731
    return f"{show(value)} ({show(spread[0])}-{show(spread[1])})"


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table: medians, (lowest-highest) over the runs."""
    lines = [
        "| scenario | estimator | batches to steady | peak delay (intervals) | batches at min rate | "
        "steady utilization | vs Sluice's PID |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [
            _cell(row["median"][f], [row["min"][f], row["max"][f]], fmt)
            for f, fmt in zip(FIELDS, ("{:g}", "{:.2f}", "{:g}", "{:.3f}"))
        ]
        versus = " ".join(row["verdict_vs_pid"][f] for f in FIELDS) if "verdict_vs_pid" in row else ""
        lines.append(f"| {row['scenario']} | {row['estimator']} | " + " | ".join(cells) + f" | {versus} |")
    return "\n".join(lines)


# -- the bench -------------------------------------------------------------------------------------


def order(rep: int, estimators: list[str], with_peer: bool) -> list[str]:
    """PID and adaptive alternate which goes first; Spark's run moves through the places."""
    ours = estimators if rep % 2 == 0 else list(reversed(estimators))
    if not with_peer:
        return ours
    slot = rep % (len(ours) + 1)
    return ours[:slot] + [SPARK] + ours[slot:]


def kafka_topic(records: int) -> tuple[Any, str]:
    """The embedded broker with one topic holding ``records`` records (the backlog every run reads
    from the start, each in a consumer group of its own)."""
    from sluice.embedded import start_kafka

    broker = start_kafka()
    topic = f"control-{time.time_ns()}"
    asyncio.run(produce(broker.bootstrap, topic, 1, records))
    return broker, topic


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, rounds=5)
    p.prog = "control"
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated scenarios")
    p.add_argument("--estimators", default="pid,adaptive", help="Sluice's estimators (Spark's PID is the peer)")
    p.add_argument("--no-peer", action="store_true", help="skip Spark's own receiver")
    p.add_argument("--seconds", type=float, help="seconds per run instead of each scenario's (smoke runs)")
    args = options(p, argv)
    reps = args.rounds
    names = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    scenarios = [SCENARIOS[s] for s in names]
    if args.quick or args.seconds:
        scenarios = [
            replace(s, setup=replace(s.setup, seconds=args.seconds or s.setup.seconds * 0.7)) for s in scenarios
        ]
    estimators = [e for e in args.estimators.split(",") if e]
    started = time.monotonic()
    spark = spark_session("sluice-bench-control", log_level="OFF")
    broker = None
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        if any(s.kafka for s in scenarios):
            broker, topic = kafka_topic(300_000)
            scenarios = [
                replace(s, setup=replace(s.setup, kafka=(broker.bootstrap, topic))) if s.kafka else s for s in scenarios
            ]
        with tempfile.TemporaryDirectory(prefix="sluice-bench-control-") as tmp:
            for rep in range(reps):
                for scenario in scenarios:
                    for estimator in order(rep, estimators, scenario.peer and not args.no_peer):
                        run = (
                            run_spark(spark, scenario.setup)
                            if estimator == SPARK
                            else run_sluice(
                                spark, scenario.setup, estimator, Path(tmp) / f"{scenario.name}-{estimator}-{rep}"
                            )
                        )
                        figs = figures(run, scenario)
                        results.setdefault((scenario.name, estimator), []).append(figs)
                        say(
                            f"# rep {rep + 1}/{reps} {scenario.name} {estimator}: "
                            f"{json.dumps({k: v for k, v in figs.items() if k != 'records'})} "
                            f"records {figs['records']} ({run.seconds:.1f} s, load {run.load:.1f})"
                        )
    finally:
        if broker is not None:
            broker.stop()
        spark.stop()
    rows = []
    for scenario in scenarios:
        peer_name = SPARK if (scenario.name, SPARK) in results else (estimators[0] if estimators else None)
        peer_runs = results.get((scenario.name, peer_name)) if peer_name else None
        scenario_rows = []
        for estimator in ([SPARK] if (scenario.name, SPARK) in results else []) + estimators:
            runs = results.get((scenario.name, estimator))
            if runs:
                scenario_rows.append(
                    fields_figure(
                        "control",
                        f"{scenario.name} / {estimator}",
                        [{k: v for k, v in r.items() if k != "records"} for r in runs],
                        FIELDS,
                        peer_runs=peer_runs if estimator != peer_name else None,
                        peer_name=peer_name,
                        quiet=True,
                        scenario=scenario.name,
                        estimator=estimator,
                    )
                )
        pid = next((r for r in scenario_rows if r["estimator"] == "pid"), None)
        for row in scenario_rows:
            if row["estimator"] not in ("pid", SPARK) and pid is not None:
                row["verdict_vs_pid"] = verdict(row, pid)
            print(json.dumps(row), flush=True)
        rows += scenario_rows
    elapsed = time.monotonic() - started
    say(table(rows))
    report(
        "control",
        seconds=round(elapsed),
        rounds=reps,
        quick=args.quick,
        interval_ms=INTERVAL_MS,
        scenarios=[s.name for s in scenarios],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
