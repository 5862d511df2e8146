"""The estimator arena's command line: every scenario x estimator, as JSON lines, a table and PNGs.

Why a bench and not a test: the table is the evidence of how each estimator settles after each
disturbance the PID is known to handle badly (a capacity step, a GC cliff, a cold start, a daily
cycle), to be read and compared; the tests assert the same figures.  The peer every row is
measured against is Spark's PID in the same run, same seeds, same noise draws.  ``--rounds N``
runs the noise seeds ``--seed`` to ``--seed + N - 1``; each scenario x estimator is one JSON line
on stdout (per figure the median, min and max over the seeds, every seed's figures, the PID's
medians and ``ratio``); the table of each seed goes to stderr.

Run: ``.venv/bin/python bench/arena.py [--quick] [--rounds N] [--estimators pid,adaptive,constant]
[--scenarios a,b] [--seed N] [--plot DIR] [--option NAME.KEY=VALUE ...]``
"""

from __future__ import annotations

import sys

from harness import fields_figure, options, parser, say

from sluice.testing.arena import DEFAULT_ESTIMATORS, run_arena, scenario_names
from sluice.testing.arena.metrics import Metrics

FIELDS = (
    "batches_to_steady",
    "peak_scheduling_delay_intervals",
    "peak_delay_after_change_intervals",
    "batches_at_min_rate",
    "steady_utilization",
    "overshoot",
    "overloaded_batches",
)
PEER = "pid"
COLUMNS = (
    ("scenario", "scenario", "{}"),
    ("estimator", "estimator", "{}"),
    ("batches_to_steady", "to steady", "{}"),
    ("peak_scheduling_delay_intervals", "peak delay", "{:.2f}"),
    ("peak_delay_after_change_intervals", "after step", "{:.2f}"),
    ("batches_at_min_rate", "at min", "{}"),
    ("steady_utilization", "util", "{:.3f}"),
    ("overshoot", "overshoot", "{:.3f}"),
    ("overloaded_batches", "overloaded", "{}"),
)


def _cell(value: object, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def table(metrics: list[Metrics]) -> str:
    """A plain-text table, one row per scenario x estimator."""
    rows = [[header for _, header, _ in COLUMNS]]
    for m in metrics:
        data = m.as_dict()
        rows.append([_cell(data[key], fmt) for key, _, fmt in COLUMNS])
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def parse_options(items: list[str]) -> dict[str, dict[str, str]]:
    """``adaptive.utilization=0.97`` -> {"adaptive": {"utilization": "0.97"}}."""
    options: dict[str, dict[str, str]] = {}
    for item in items:
        name, _, rest = item.partition(".")
        key, eq, value = rest.partition("=")
        if not name or not key or not eq:
            raise SystemExit(f"arena: --option {item!r} must look like ESTIMATOR.KEY=VALUE")
        options.setdefault(name, {})[key] = value
    return options


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, rounds=1)
    p.prog = "arena"
    p.add_argument(
        "--estimators",
        default=",".join(DEFAULT_ESTIMATORS),
        help="comma-separated estimator names (any registered, plugins too)",
    )
    p.add_argument(
        "--scenarios",
        default=",".join(scenario_names()),
        help=f"comma-separated scenarios (default all: {', '.join(scenario_names())})",
    )
    p.add_argument("--seed", type=int, default=0, help="first noise seed (same seed, same numbers)")
    p.add_argument("--plot", metavar="DIR", help="write one PNG per scenario into DIR (first seed)")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="EST.KEY=VALUE",
        help="an estimator option, e.g. adaptive.utilization=0.97 (repeatable)",
    )
    args = options(p, argv)
    names = [n for n in args.estimators.split(",") if n]
    scenarios = [s for s in args.scenarios.split(",") if s]
    option_map = parse_options(args.option)
    seeds = list(range(args.seed, args.seed + args.rounds))
    per_seed = []
    try:
        for seed in seeds:
            per_seed.append(
                run_arena(scenarios, names, seed=seed, options={k: v for k, v in option_map.items()} or None)
            )
    except ValueError as exc:
        print(f"arena: {exc}", file=sys.stderr)
        return 2
    rows: dict[tuple[str, str], list[dict]] = {}
    for seed, results in zip(seeds, per_seed):
        say(f"seed {seed}:\n{table([r.metrics for r in results])}")
        for r in results:
            m = r.metrics.as_dict()
            rows.setdefault((m["scenario"], m["estimator"]), []).append({**m, "seed": seed})
    for (scenario, estimator), runs in rows.items():
        peer = rows.get((scenario, PEER)) if estimator != PEER else None
        fields_figure(
            "arena",
            f"{scenario} / {estimator}",
            runs,
            FIELDS,
            peer_runs=peer,
            peer_name="Spark's PID" if peer else None,
            scenario=scenario,
            estimator=estimator,
            seeds=seeds,
        )
    if args.plot:
        from sluice.testing.arena.plot import plot_results

        for path in plot_results(per_seed[0], args.plot):
            say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
