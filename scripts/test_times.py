"""Where a test run's time goes, from the files ``pytest --timings=PATH`` writes (tests/timings.py):
one line per tier (what ``make test`` prints last), or a table per tier and kind of test for
docs/development.md (``make test-times`` writes its data, ``docs/test-times.json``, which the docs
hook renders when the site is built).

Each phase of a test counts as *wall* seconds, of which *CPU* seconds are work (this process and the
processes it started) and the rest is *waiting* (a JVM starting, a broker, a timeout).  Set-up is
where the start-ups show: a session fixture's broker or SparkSession is started in the set-up of
the first test of each worker that takes it.

    python scripts/test_times.py summary .test-times/*.json
    python scripts/test_times.py table .test-times/*.json [--write docs/test-times.json]
    python scripts/test_times.py durations .test-times/*.json --write tests/durations.json

The durations file is each test's wall seconds in that run (the tests of a second or more):
tests/conftest.py starts the longest first, so that pytest-xdist's workers are not left waiting on
one long test started last.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PHASES = ("setup", "call", "teardown")
NAMESPACES = ("tests/chaos/test_campaign.py", "tests/chaos/test_high_availability.py", "tests/chaos/test_netns.py")
# A test counts under the first kind it is: what it waits for, most expensive first.
KINDS = (
    ("bench smoke runs", lambda t: "smoke" in t["markers"]),
    ("network namespaces (fault campaigns)", lambda t: t["id"].startswith(NAMESPACES)),
    ("the shared SparkSession", lambda t: "spark" in t["markers"]),
    ("the shared broker", lambda t: "kafka_broker" in t["fixtures"]),
    ("the shared S3 server", lambda t: "s3" in t["fixtures"]),
    ("processes of its own", lambda t: cpu_of(t, "cpu_others_s") > 0.05),
    ("in-process only", lambda t: True),
)


def cpu_of(test: Mapping[str, Any], key: str) -> float:
    return sum(test[p][key] for p in PHASES if p in test)


def phase_totals(tests: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Wall seconds per phase, CPU seconds and waiting seconds (wall not spent on a CPU, per phase)."""
    totals = dict.fromkeys((*PHASES, "cpu", "waiting"), 0.0)
    for test in tests:
        for phase in PHASES:
            if phase not in test:
                continue
            wall, cpu = test[phase]["wall_s"], test[phase]["cpu_own_s"] + test[phase]["cpu_others_s"]
            totals[phase] += wall
            totals["cpu"] += cpu
            totals["waiting"] += max(0.0, wall - cpu)
    return {key: round(value, 1) for key, value in totals.items()}


def kind(test: Mapping[str, Any]) -> str:
    return next(name for name, matches in KINDS if matches(test))


def summarise(tiers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per tier: its wall time, workers and load, its phase totals, and the same per kind of test."""
    out = []
    for tier in tiers:
        by_kind: dict[str, list[Mapping[str, Any]]] = {}
        for test in tier["tests"]:
            by_kind.setdefault(kind(test), []).append(test)
        kinds = [
            {"kind": name, "tests": len(by_kind[name]), **phase_totals(by_kind[name])}
            for name, _ in KINDS
            if name in by_kind
        ]
        out.append(
            {
                "tier": tier["tier"],
                "wall_s": tier["wall_s"],
                "workers": tier["workers"],
                "load_average": tier["load_average"],
                "tests": len(tier["tests"]),
                **phase_totals(tier["tests"]),
                "kinds": kinds,
            }
        )
    return out


def summary_line(tier: Mapping[str, Any]) -> str:
    """One tier in a line: the wall time first, then what the tests' own seconds were made of."""
    return (
        f"{tier['tier']}: {tier['tests']} tests in {tier['wall_s']:.0f} s on {tier['workers']} workers "
        f"(load {tier['load_average'][0]}); test time: set-up {tier['setup']:.0f} s, call {tier['call']:.0f} s, "
        f"teardown {tier['teardown']:.0f} s; of it CPU {tier['cpu']:.0f} s, waiting {tier['waiting']:.0f} s"
    )


def render(summary: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown table: a row per tier (its wall time), then a row per kind of test in it."""
    rows = [
        "| tier / kind of test | tests | wall | set-up | call | teardown | CPU (work) | waiting |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for tier in summary:
        rows.append(
            f"| **{tier['tier']}** ({tier['workers']} workers, load {tier['load_average'][0]}) | {tier['tests']} "
            f"| **{tier['wall_s']:.0f} s** | {tier['setup']:.0f} s | {tier['call']:.0f} s | {tier['teardown']:.0f} s "
            f"| {tier['cpu']:.0f} s | {tier['waiting']:.0f} s |"
        )
        for k in tier["kinds"]:
            rows.append(
                f"| ↳ {k['kind']} | {k['tests']} | | {k['setup']:.0f} s | {k['call']:.0f} s | {k['teardown']:.0f} s "
                f"| {k['cpu']:.0f} s | {k['waiting']:.0f} s |"
            )
    return "\n".join(rows)


# Shorter tests are left out: they are many and their order hardly matters.
DURATION_FLOOR_S = 1.0


def durations(tiers: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each test's wall seconds (set-up, call and teardown), for those of at least a second, sorted
    by test id so that the file's diffs show what changed."""
    walls = {
        test["id"]: sum(test[p]["wall_s"] for p in PHASES if p in test) for tier in tiers for test in tier["tests"]
    }
    return {key: round(wall, 1) for key, wall in sorted(walls.items()) if wall >= DURATION_FLOOR_S}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("summary", "table", "durations"))
    parser.add_argument("files", nargs="+", type=Path, help="files pytest --timings wrote, one per tier")
    parser.add_argument("--write", type=Path, help="with table or durations: write the JSON there instead")
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.files if not f.is_file()]
    if missing:
        parser.error(f"no timings file at {', '.join(missing)}: run the tiers with --timings=PATH first")
    tiers = [json.loads(f.read_text()) for f in args.files]
    if args.what == "durations":
        text = json.dumps(durations(tiers), indent=1) + "\n"
        if args.write:
            args.write.write_text(text)
        else:
            print(text, end="")
        return 0
    summary = summarise(tiers)
    if args.what == "summary":
        print("\n".join(summary_line(tier) for tier in summary))
    elif args.write:
        args.write.write_text(json.dumps(summary, indent=1) + "\n")
    else:
        print(render(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
