"""Sluice's paths at the heavy weight of ``bench/peers.py`` on a Spark standalone cluster with one and
then two one-core workers, against the Python peers on the same topic in the same rounds.

On a 2-core machine one worker is one core and two workers are two: the ratio of the two records/s
says how far a path scales out when the per-record work is the bottleneck, and CPU seconds per
million records say what it pays for that against the peers (each in one process, as deployed).

The cluster is :mod:`sluice.testing.standalone` (pyspark's ``bin/spark-class``), started once; each
round runs its three sides in rotating order: the Sluice paths (``--paths``) with one worker, with
two (the cluster resized between them), and the peers (``--peers``) once each (``--quick``: one
worker only, a cluster of one, so no line of two workers over one).  Every run is a fresh worker
process of ``bench/peers.py`` (its own driver, so its own application and executors) reading the
whole backlog of ``--records`` heavy records.  A Sluice run's CPU counts its own process
tree and the cluster's (master, workers, executors, their Python workers); the broker is shared and
not counted.

Figures, one JSON line each: records/s of each Sluice path with one worker against the best Python
peer, with two workers against the same path with one (``ratio``: two over one), the peers' records/s,
and CPU s per million records of every side against the best peer's.

    .venv/bin/python bench/peers_scale.py [--quick] [--rounds 3] [--records 100000]
        [--paths sluice-receiver,sluice-direct,sluice-kafka-structured]
        [--peers quixstreams,bytewax,faust-streaming,aiokafka] [--spins N] [--worker-memory 1g]
        [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import add_bootstrap, figure, fresh_topic, kafka, options, order, parser, say
from peers import FLOOR, PARTITIONS, PEERS, SPARK_PATHS, Runs, add_spins, median, warm_topic

if TYPE_CHECKING:
    from sluice.testing.standalone import StandaloneCluster

WORKERS = (1, 2)
PEER_SIDE = "peers"
EXECUTOR_MEMORY = "512m"


def side_name(workers: int) -> str:
    return f"{workers} worker{'s' if workers > 1 else ''}"


def spark_conf(workers: int) -> dict[str, str]:
    """Every worker's core and nothing more; the first batch waits for all executors (standalone
    counts expected cores only from ``spark.cores.max``), so a run never starts on one of two.
    The executors start as the drivers do (:func:`sluice.testing.standalone.cluster_jvm`)."""
    from sluice.testing.standalone import cluster_jvm

    return {
        "spark.cores.max": str(workers),
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        **cluster_jvm()[1],
    }


def measure(runs: Runs, side: str, spec: dict[str, Any], expected: int) -> None:
    """One run of ``spec["path"]`` into ``runs`` under ``side``; a failure takes the path out."""
    path = spec["path"]
    out = runs.run("peers_scale", spec, expected, f"{side} {path}", side=side)
    if out is None:
        return
    rate = out["count"] / out["seconds"]
    runs.add(side, path, "records/s", rate)
    runs.add(side, path, "CPU s per million records", out["cpu_seconds"] / out["count"] * 1e6)
    say(
        f"  {side} {path}: {rate:,.0f} records/s, {out['cpu_seconds']:.1f} CPU s in {out['processes']} processes "
        f"({out['run_seconds']:.0f} s run)"
    )


def rounds(
    args: argparse.Namespace,
    cluster: StandaloneCluster,
    counts: tuple[int, ...],
    runs: Runs,
    base: dict[str, Any],
    expected: int,
) -> None:
    """Each round: each of the worker ``counts`` and the peers, in rotating order (the cluster resized
    once per side), so the machine's drift hits every side alike."""
    sides = [*(side_name(n) for n in counts), PEER_SIDE]
    for r in range(args.rounds):
        for side in order(r, sides):
            if side == PEER_SIDE:
                for path in order(r, [p for p in runs.alive() if p not in SPARK_PATHS]):
                    measure(runs, side, {**base, "path": path}, expected)
                continue
            workers = counts[sides.index(side)]
            cluster.resize(workers)
            say(f"round {r + 1}: {side} alive")
            for path in order(r, [p for p in runs.alive() if p in SPARK_PATHS]):
                on_cluster = {"master": cluster.url, "spark_conf": spark_conf(workers), "meter_roots": cluster.pids}
                measure(runs, side, {**base, "path": path, **on_cluster}, expected)


def figures(runs: Runs, counts: tuple[int, ...], extra: dict[str, Any]) -> None:
    """Records/s: one worker against the best peer, two against one; CPU: every side against the best peer."""
    peers = [p for p in PEERS if runs.get(PEER_SIDE, p, "records/s")]
    best = max(peers, key=lambda p: median(runs.get(PEER_SIDE, p, "records/s")), default=None)
    sides = [side_name(n) for n in counts]
    one = sides[0]
    for name in ("records/s", "CPU s per million records"):
        unit, digits = ("records/s", 0) if name == "records/s" else ("s", 1)
        best_values = runs.get(PEER_SIDE, best, name) if best else []
        for path in runs.paths:
            for side in sides if path in SPARK_PATHS else (PEER_SIDE,):
                values = runs.get(side, path, name)
                if not values:
                    continue
                peer, peer_name = best_values, f"{best}, same rounds"
                if side != one and name == "records/s" and runs.get(one, path, name):
                    peer, peer_name = runs.get(one, path, name), f"{path}, {one}, same rounds"
                where: dict[str, Any] = {"path": path, **extra}
                if side != PEER_SIDE:
                    where["workers"] = counts[sides.index(side)]
                figure(
                    "peers_scale",
                    f"heavy, standalone: {name}, {path}" + (f", {side}" if side != PEER_SIDE else ""),
                    unit,
                    values,
                    peer=peer or None,
                    peer_name=peer_name if peer else None,
                    digits=digits,
                    **where,
                )


def main() -> None:
    p = parser(__doc__, rounds=3)
    p.add_argument("--paths", default=",".join(SPARK_PATHS), help=f"Sluice paths, of {', '.join(SPARK_PATHS)}")
    p.add_argument("--peers", default=",".join((*PEERS, FLOOR)), help=f"of {', '.join((*PEERS, FLOOR))}")
    p.add_argument("--records", type=int, default=None, help="heavy backlog records (default 100,000; --quick 400)")
    add_spins(p)
    p.add_argument("--worker-memory", default="1g", help="each worker's --memory (executors get 512m)")
    p.add_argument("--interval-ms", type=int, default=1000, help="the Sluice paths' batch interval")
    add_bootstrap(p)
    args = options(p)
    paths = [x for x in args.paths.split(",") if x]
    peers = [x for x in args.peers.split(",") if x]
    if bad := [x for x in paths if x not in SPARK_PATHS] + [x for x in peers if x not in (*PEERS, FLOOR)]:
        p.error(f"unknown path {bad[0]!r}")
    run(args, [*paths, *peers], args.records or (400 if args.quick else 100_000))


def run(args: argparse.Namespace, paths: list[str], records: int) -> None:
    from peer_paths.work import calibrate, expected_checksum
    from peer_paths.worker import produce_backlog

    from sluice.testing.standalone import start_standalone

    spins = args.spins or calibrate()
    say(f"heavy weight: {spins} spins per record" + ("" if args.spins else " (~100 µs here)"))
    counts = WORKERS[:1] if args.quick else WORKERS  # a smoke run: one Spark application, on one worker
    runs = Runs(paths)
    with kafka(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory(prefix="sluice-bench-scale-") as tmp:
        cluster = start_standalone(Path(tmp), max(counts), args.worker_memory)
        try:
            topic = fresh_topic("peers-scale")
            produce_backlog(bootstrap, topic, PARTITIONS, records)
            say(f"{records:,} heavy records in {topic} ({PARTITIONS} partitions); cluster at {cluster.url}")
            base = {
                "bootstrap": bootstrap,
                "topic": topic,
                "partitions": PARTITIONS,
                "records": records,
                "weight": "heavy",
                "spins": spins,
                "interval_ms": args.interval_ms,
                **warm_topic(bootstrap, topic),
            }
            rounds(args, cluster, counts, runs, base, expected_checksum("heavy", spins, records))
        finally:
            cluster.stop()
    extra = {
        "weight": "heavy",
        "records": records,
        "spins": spins,
        "worker_cores": 1,
        "worker_memory": args.worker_memory,
        "executor_memory": EXECUTOR_MEMORY,
    }
    figures(runs, counts, extra)
    for path, problem in runs.failed.items():
        say(f"{path} could not run: {problem}")


if __name__ == "__main__":
    main()
