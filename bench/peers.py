"""Sluice against what a Python team would pick instead: Quix Streams, Bytewax, faust-streaming,
and a raw aiokafka loop as the floor, on one 8-partition topic of one Apache Kafka broker (KRaft).

Every path runs the same per-record function on every record (light: parse the JSON value and take
a field; heavy: that plus ~100 µs of pure Python, calibrated once per run) into the same sink (a
count and a checksum, checked against what was produced), each path in a worker process of its own
(``--worker``; see ``peer_paths/``).  Paths: ``sluice-receiver`` (tracker + Kafka receiver +
``StreamingDriver``), ``sluice-direct`` (``DirectKafkaSource``), ``sluice-kafka-structured``
(``readStream.format("sluice-kafka")``), ``quixstreams``, ``bytewax`` (its ``KafkaSource``),
``faust-streaming`` and ``aiokafka``.  The Sluice paths run on ``local[2]`` (``--master``), 1 s
batches, backpressure off; the peers in one process each, as each is deployed by default.

Figures, per weight and path, one JSON line each, ``ratio`` against the best Python peer (Quix
Streams, Bytewax or Faust, whichever has the highest median records/s at that weight; the best one's
own line has ``ratio`` 1):

* records/s end to end: a backlog of ``--records``, from the first record into the function to the
  last record's output (for a Spark path the end of the batch that carried it); a Spark path first
  reads a small topic of its own in the same session (its Python workers forked and their modules
  imported: an application pays that once, a peer before its first record);
* p50 and p99 latency (produced -> output) at 50 % and 80 % of that path's own median records/s
  (``--quick``: 80 % only), the producer rate-limited (``--seconds`` of records), after a warm-up:
  a second's worth of records produced at once and output by the path before the timed part starts
  (its group joined, its first job run), and the timed part's first second;
* peak RSS of every process of the path (the worker, its JVM, Spark's Python workers, the tracker
  and the receiver), sampled every 200 ms with psutil; the broker is shared and not counted;
* CPU seconds per million records over the same window as records/s, all of the path's processes.

Rounds alternate the paths (order rotating).  A path that fails prints a line with its error and is
left out of the later rounds, never silently.

    .venv/bin/python bench/peers.py [--quick] [--rounds 3] [--paths a,b] [--weights light,heavy]
        [--records-light 200000] [--records-heavy 60000] [--spins N] [--seconds 6] [--no-latency] [--master URL]
        [--max-batch-partitions N] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import add_bootstrap, figure, fresh_topic, kafka, options, order, parser, report, say
from peer_paths.worker import WARM_UP

SPARK_PATHS = ("sluice-receiver", "sluice-direct", "sluice-kafka-structured")
PEERS = ("quixstreams", "bytewax", "faust-streaming")
FLOOR = "aiokafka"
PATHS = (*SPARK_PATHS, *PEERS, FLOOR)
PARTITIONS = 8
FRACTIONS = (0.5, 0.8)
#: A latency run's warm-up records, in seconds at its rate: produced at once, output before the timed part.
WARM_SECONDS = 1.0
#: Records per partition of the topic a Spark path reads once before a backlog run (its workers' start-up).
WARM_TOPIC_RECORDS = 250


def add_spins(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--spins",
        type=int,
        default=None,
        help="the heavy function's spins per record (default: calibrated to ~100 µs now; a busy machine "
        "calibrates slow, so give a quiet machine's count, such as the spins of docs/benchmarks/peers.jsonl)",
    )


def warm_topic(bootstrap: str, topic: str) -> dict[str, Any]:
    """A small topic beside ``topic``, produced, which a Spark path reads once in its session before a
    backlog run (:func:`peer_paths.worker.warm_up`); the spec's fields that name it."""
    from peer_paths.worker import produce_backlog

    records = PARTITIONS * WARM_TOPIC_RECORDS
    produce_backlog(bootstrap, f"{topic}-warm", PARTITIONS, records)
    return {"warm_topic": f"{topic}-warm", "warm_topic_records": records}


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One run of one path in a fresh process; its result, or ``{"error": ...}``."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__)), "--worker", json.dumps(spec)], capture_output=True, text=True
    )
    # the result is the last line's JSON object (a peer may have written terminal escapes before it)
    lines = [line[line.index("{") :] for line in proc.stdout.splitlines() if line.rstrip().endswith("}")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    out = json.loads(lines[-1])
    out["run_seconds"] = time.monotonic() - started
    return out


def check(out: dict[str, Any], expected: int) -> str | None:
    """Why a run's sink is wrong (a count or checksum off), or None."""
    if "error" in out:
        return out["error"]
    if out["count"] != out["expected_count"] or out["checksum"] != expected:
        return f"sink: {out['count']} records, checksum {out['checksum']}; expected {out['expected_count']}, {expected}"
    return None


class Runs:
    """The results of every path's runs, per figure key; a path that failed once is out."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.failed: dict[str, str] = {}
        self.values: dict[tuple[str, str, str], list[float]] = {}

    def alive(self) -> list[str]:
        return [p for p in self.paths if p not in self.failed]

    def add(self, weight: str, path: str, name: str, v: float | None) -> None:
        if v is not None:
            self.values.setdefault((weight, path, name), []).append(v)

    def get(self, weight: str, path: str, name: str) -> list[float]:
        return self.values.get((weight, path, name), [])

    def run(self, bench: str, spec: dict[str, Any], expected: int, label: str, **fields: Any) -> dict[str, Any] | None:
        """One run of ``spec`` (:func:`worker`) with its sink checked; a failure is reported (with
        ``fields``), takes the path out and gives None."""
        out = worker(spec)
        if "error" not in out:
            out["expected_count"] = spec["records"]
        if problem := check(out, expected):
            self.failed[spec["path"]] = problem
            report(bench, path=spec["path"], **fields, error=problem)
            say(f"  {label}: FAILED {problem}")
            return None
        return out


def throughput(args: argparse.Namespace, runs: Runs, weight: str, base: dict[str, Any], expected: int) -> None:
    for r in range(args.rounds):
        for path in order(r, runs.alive()):
            out = runs.run("peers", {**base, "path": path}, expected, f"{weight} {path}", weight=weight)
            if out is None:
                continue
            rate = out["count"] / out["seconds"]
            runs.add(weight, path, "records/s", rate)
            runs.add(weight, path, "peak RSS", out["peak_rss_mb"])
            runs.add(weight, path, "CPU s per million records", out["cpu_seconds"] / out["count"] * 1e6)
            say(
                f"  round {r + 1} {weight} {path}: {rate:,.0f} records/s, {out['cpu_seconds']:.1f} CPU s, "
                f"{out['peak_rss_mb']:.0f} MB in {out['processes']} processes ({out['run_seconds']:.0f} s run)"
            )


def latency(args: argparse.Namespace, runs: Runs, weight: str, base: dict[str, Any], expected_of) -> None:
    from sluice.embedded import create_topic

    for fraction in FRACTIONS[-1:] if args.quick else FRACTIONS:  # a smoke run: one load
        for r in range(args.rounds):
            for path in order(r, runs.alive()):
                capacity = median(runs.get(weight, path, "records/s"))
                rate = fraction * capacity
                warm = max(PARTITIONS * 10, int(rate * WARM_SECONDS))
                records = warm + max(PARTITIONS * 10, int(rate * args.seconds))
                topic = asyncio.run(create_topic(base["bootstrap"], PARTITIONS, None))
                spec = {**base, "path": path, "topic": topic, "records": records, "rate": rate, "warm_records": warm}
                spec.update(warm_topic=None)  # the run's own warm-up records start its workers
                out = runs.run(
                    "peers", spec, expected_of(records), f"{weight} {path} at {rate:,.0f}/s", weight=weight, rate=rate
                )
                if out is None:
                    continue
                pct = round(fraction * 100)
                if out["p50_ms"] is None:
                    say(f"  {weight} {path} at {rate:,.0f}/s: no record after the warm-up (--seconds too short)")
                    continue
                runs.add(weight, path, f"p50 latency at {pct}%", out["p50_ms"])
                runs.add(weight, path, f"p99 latency at {pct}%", out["p99_ms"])
                runs.add(weight, path, f"offered at {pct}%", out["offered_rate"])
                say(
                    f"  round {r + 1} {weight} {path} at {rate:,.0f}/s ({pct}%, offered {out['offered_rate']:,.0f}/s): "
                    f"p50 {out['p50_ms']:.0f} ms, p99 {out['p99_ms']:.0f} ms ({out['samples']} samples)"
                )


def median(values: list[float]) -> float:
    import statistics

    return statistics.median(values) if values else 0.0


UNITS = {"records/s": "records/s", "peak RSS": "MB", "CPU s per million records": "s"}


def figures(runs: Runs, weight: str, extra: dict[str, Any]) -> None:
    """One line per path and figure, each against the best Python peer of this weight."""
    peers = [p for p in PEERS if runs.get(weight, p, "records/s")]
    best = max(peers, key=lambda p: median(runs.get(weight, p, "records/s")), default=None)
    names = ["records/s", *(f"p{q} latency at {round(f * 100)}%" for f in FRACTIONS for q in (50, 99))]
    names += ["peak RSS", "CPU s per million records"]
    for name in names:
        for path in runs.paths:
            values = runs.get(weight, path, name)
            if not values:
                continue
            peer = runs.get(weight, best, name) if best else []
            offered = runs.get(weight, path, "offered at " + name.rpartition(" at ")[2])  # latency lines
            fields: dict[str, Any] = {"offered_rate": round(median(offered))} if offered else {}
            figure(
                "peers",
                f"{weight}: {name}, {path}",
                UNITS.get(name, "ms"),
                values,
                peer=peer or None,
                peer_name=f"{best}, same rounds" if peer else None,
                digits=1 if name != "records/s" else 0,
                weight=weight,
                path=path,
                **fields,
                **extra,
            )


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        from peer_paths.worker import main as worker_main

        worker_main(sys.argv[2])
        return
    p = parser(__doc__, rounds=3)
    p.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    p.add_argument("--weights", default="light,heavy")
    p.add_argument("--records-light", type=int, default=None, help="backlog records (default 200,000; --quick 4,000)")
    p.add_argument("--records-heavy", type=int, default=None, help="backlog records (default 60,000; --quick 1,000)")
    add_spins(p)
    p.add_argument("--seconds", type=float, default=None, help="seconds of records per latency run (6; --quick 2)")
    p.add_argument("--no-latency", action="store_true", help="records/s, RSS and CPU only")
    p.add_argument("--master", default="local[2]", help="the Sluice paths' Spark master")
    p.add_argument("--interval-ms", type=int, default=1000, help="the Sluice paths' batch interval")
    p.add_argument(
        "--max-batch-partitions",
        type=int,
        default=0,
        help="the receiver path's driver.max_batch_partitions (0: one task per block)",
    )
    add_bootstrap(p)
    args = options(p)
    paths = [x for x in args.paths.split(",") if x]
    weights = [x for x in args.weights.split(",") if x]
    if bad := [x for x in paths if x not in PATHS]:
        p.error(f"unknown path {bad[0]!r}: the paths are {', '.join(PATHS)}")
    if bad := [x for x in weights if x not in ("light", "heavy")]:
        p.error(f"unknown weight {bad[0]!r}: the weights are light and heavy")
    args.seconds = args.seconds or (2.0 if args.quick else 6.0)
    if args.seconds <= WARM_UP:  # the percentiles skip the timed part's first WARM_UP seconds
        p.error(f"--seconds must be more than {WARM_UP:g}: latency is taken from {WARM_UP:g} s into each run on")
    records = {
        "light": args.records_light or (4_000 if args.quick else 200_000),
        "heavy": args.records_heavy or (1_000 if args.quick else 60_000),
    }
    run(args, paths, weights, records)


def run(args: argparse.Namespace, paths: list[str], weights: list[str], records: dict[str, int]) -> None:
    from peer_paths.work import calibrate, expected_checksum
    from peer_paths.worker import produce_backlog

    spins = args.spins or calibrate()
    say(f"heavy weight: {spins} spins per record" + ("" if args.spins else " (~100 µs here)"))
    runs = Runs(paths)
    with kafka(args.bootstrap) as bootstrap:
        for weight in weights:
            topic = fresh_topic(f"peers-{weight}")
            produce_backlog(bootstrap, topic, PARTITIONS, records[weight])
            say(f"{weight}: {records[weight]:,} records in {topic} ({PARTITIONS} partitions)")
            base = {
                "bootstrap": bootstrap,
                "topic": topic,
                "partitions": PARTITIONS,
                "records": records[weight],
                "weight": weight,
                "spins": spins,
                "interval_ms": args.interval_ms,
                "master": args.master,
                "max_batch_partitions": args.max_batch_partitions,
                **warm_topic(bootstrap, topic),
            }
            throughput(args, runs, weight, base, expected_checksum(weight, spins, records[weight]))
            if not args.no_latency:
                latency(args, runs, weight, base, lambda n, w=weight: expected_checksum(w, spins, n))
            extra = {"records": records[weight], "spins": spins, "master": args.master}
            figures(runs, weight, extra | {"max_batch_partitions": args.max_batch_partitions})
    for path, problem in runs.failed.items():
        say(f"{path} could not run: {problem}")


if __name__ == "__main__":
    main()
