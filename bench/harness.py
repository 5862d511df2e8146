"""What every benchmark shares: its command line, alternating rounds, the figures of a series
(median, min, max, runs), the ratio against a peer measured in the same rounds, the machine's
load, and one JSON object per line on stdout (prose goes to stderr).

Run a benchmark as ``.venv/bin/python bench/<name>.py [--quick] [--rounds N]``: Python puts
``bench/`` first on the path, so ``import harness`` finds this module, and Sluice is installed
(``make install``), so everything else is ``sluice.*``.  Processes (the broker, the tracker,
receivers) are started with :mod:`sluice.embedded`, the same functions the tests and the demo use;
a bench on Kafka takes ``--bootstrap`` to use a running broker instead of starting its own (the
smoke tests pass their per-worker broker: a JVM less to start per run).

Benchmarks measure from outside: wall time around a whole run, CPU time of the processes, ratios
against a peer measured in the same alternating rounds (the machine is shared: its drift hits
both sides alike, and the load average printed with each figure says how busy it was).
``--quick`` is a smoke run (seconds; its figures are not evidence).  Where a figure needs the
inside of the pipeline, ``--profile FILE`` runs the measured part under :mod:`cProfile`.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import math
import os
import statistics
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sluice.embedded import create_topic

T = TypeVar("T")  # a side of a comparison
V = TypeVar("V")  # what one run of a side measures

DEFAULT_ROUNDS = 5


def parser(doc: str | None, *, rounds: int = DEFAULT_ROUNDS, quick_rounds: int = 1) -> argparse.ArgumentParser:
    """The bench's command line with the shared ``--quick`` and ``--rounds`` (``options`` reads them)."""
    p = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    p.add_argument("--quick", action="store_true", help="a smoke run of seconds: small sizes, few rounds (no evidence)")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"alternating rounds per figure (default {rounds}, --quick {quick_rounds})",
    )
    p.set_defaults(default_rounds=rounds, quick_rounds=quick_rounds)
    return p


def options(p: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse; ``rounds`` becomes the number to run (``--rounds``, else the quick or full default)."""
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = args.quick_rounds if args.quick else args.default_rounds
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    return args


def add_bootstrap(p: argparse.ArgumentParser) -> None:
    """``--bootstrap``: a running Apache Kafka broker to read and write instead of one the bench
    starts (``kafka`` yields it); the bench's topics on it are fresh ones of its own."""
    p.add_argument(
        "--bootstrap",
        default=None,
        metavar="HOST:PORT",
        help="an Apache Kafka broker to use (default: start one from its jars for this run)",
    )


@contextmanager
def kafka(bootstrap: str | None) -> Iterator[str]:
    """The bootstrap of ``bootstrap``'s broker, or of one started for the block (and stopped after)."""
    if bootstrap:
        yield bootstrap
        return
    from sluice.embedded import start_kafka

    broker = start_kafka()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def fresh_topic(prefix: str) -> str:
    """A topic name no earlier run on the same broker used (a given broker outlives the bench)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def say(*parts: Any) -> None:
    """Prose for the reader, on stderr (stdout holds only JSON lines)."""
    print(*parts, file=sys.stderr, flush=True)


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (the machine is shared)."""
    return [round(x, 2) for x in os.getloadavg()]


def order(round_no: int, names: Sequence[T]) -> list[T]:
    """The sides in the order of round ``round_no``: rotated each round, so no side always goes first."""
    k = round_no % len(names)
    return list(names[k:]) + list(names[:k])


def alternate(rounds: int, sides: Mapping[str, Callable[[int], V]]) -> dict[str, list[V]]:
    """Run every side once per round, the order rotating; each side's values in round order."""
    values: dict[str, list[V]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in order(r, list(sides)):
            values[name].append(sides[name](r))
    return values


async def alternate_async(rounds: int, sides: Mapping[str, Callable[[int], Awaitable[V]]]) -> dict[str, list[V]]:
    """:func:`alternate` for coroutine functions."""
    values: dict[str, list[V]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in order(r, list(sides)):
            values[name].append(await sides[name](r))
    return values


def series(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    """Median, min, max and every run of a series of measurements."""
    if not values:
        raise ValueError("a series needs at least one measurement")
    r = lambda v: round(float(v), digits)  # noqa: E731
    return {
        "median": r(statistics.median(values)),
        "min": r(min(values)),
        "max": r(max(values)),
        "runs": [r(v) for v in values],
    }


def ratio_of_medians(ours: Sequence[float], peer: Sequence[float]) -> float:
    return statistics.median(ours) / statistics.median(peer)


def figure(
    bench: str,
    name: str,
    unit: str,
    values: Sequence[float],
    *,
    peer: Sequence[float] | None = None,
    peer_name: str | None = None,
    target: str | None = None,
    target_of: str = "ratio",
    digits: int = 3,
    **extra: Any,
) -> dict[str, Any]:
    """Print one figure as a JSON line and return it: its series, the peer's series from the same
    rounds and ``ratio`` (our median / the peer's), the target (``">= 0.9"``, on ``target_of``:
    ``ratio`` or ``median``) and whether it was met, the load."""
    line: dict[str, Any] = {"bench": bench, "figure": name, "unit": unit, **series(values, digits)}
    if peer is not None:
        line["peer"] = {"name": peer_name, "unit": unit, **series(peer, digits)}
        line["ratio"] = round(ratio_of_medians(values, peer), 3)
    if target is not None:
        op, bound = target.split()
        value = line[target_of]
        line["target"] = f"{target_of} {target}"
        line["met"] = value >= float(bound) if op == ">=" else value <= float(bound)
    line.update(extra)
    line["load_average"] = load_average()
    print(json.dumps(line, default=str), flush=True)
    return line


def median_or_never(values: Sequence[Any]) -> Any:
    """The median where ``None`` means "never" and counts as the largest; ``None`` if the median is never."""
    ordered = sorted(values, key=_never_last)
    n = len(ordered)
    if n % 2:
        return ordered[n // 2]
    if ordered[n // 2] is None:
        return None
    return (_never_last(ordered[n // 2 - 1]) + _never_last(ordered[n // 2])) / 2


def _never_last(value: Any) -> float:
    return math.inf if value is None else float(value)


def fields_figure(
    bench: str,
    name: str,
    runs: Sequence[Mapping[str, Any]],
    fields: Sequence[str],
    *,
    peer_runs: Sequence[Mapping[str, Any]] | None = None,
    peer_name: str | None = None,
    quiet: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """One JSON line (printed unless ``quiet``) for a figure made of several fields (``None``: never):
    per field the median, min and max over the runs, every run, the peer's and ``ratio`` per field."""

    def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {
            "median": {f: median_or_never([r[f] for r in rows]) for f in fields},
            "min": {f: min((r[f] for r in rows), key=_never_last) for f in fields},
            "max": {f: max((r[f] for r in rows), key=_never_last) for f in fields},
        }

    line: dict[str, Any] = {"bench": bench, "figure": name, **summary(runs), "runs": [dict(r) for r in runs]}
    if peer_runs:
        peer = summary(peer_runs)
        line["peer"] = {"name": peer_name, **peer}
        line["ratio"] = {
            f: (
                None
                if line["median"][f] is None or not peer["median"][f]
                else round(float(line["median"][f]) / float(peer["median"][f]), 3)
            )
            for f in fields
        }
    line.update(extra)
    line["load_average"] = load_average()
    if not quiet:
        print(json.dumps(line, default=str), flush=True)
    return line


def report(bench: str, **figures: Any) -> None:
    """A JSON line of figures that are not one series (a bench's summary); the load is added."""
    print(json.dumps({"bench": bench, **figures, "load_average": load_average()}, default=str), flush=True)


async def produce(bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int = 100) -> None:
    """Create ``topic`` and fill it with ``records`` numbered records spread evenly over its partitions
    (the counts differ by at most one: a primer of one record per partition puts offset 0 in each).

    Record ``i`` has the key ``i % 1000`` and a value starting with ``i`` (nine digits), padded to
    ``value_bytes``.  Records go in whole producer batches, so producing is not what is measured.
    """
    from aiokafka import AIOKafkaProducer

    await create_topic(bootstrap, partitions, topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    padding = b"x" * max(0, value_bytes - 9)
    quota = [records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)]
    futures, i = [], 0
    try:
        while i < records:
            for partition in range(partitions):
                batch, first = producer.create_batch(), i
                while (
                    quota[partition]
                    and batch.append(key=b"%d" % (i % 1000), value=b"%09d" % i + padding, timestamp=None) is not None
                ):
                    i += 1
                    quota[partition] -= 1
                batch.close()
                if i > first:
                    futures.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def spark_session(app: str, master: str = "local[2]", log_level: str = "ERROR") -> Any:
    """The bench's Spark session: loopback only, no UI, workers running this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(log_level)
    return spark


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, its reaped children included (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


@contextmanager
def profiled(path: Path | None) -> Iterator[None]:
    """Profile the block with cProfile into ``path`` (``python -m pstats path`` reads it); nothing if None."""
    if path is None:
        yield
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(path)
        say(f"profile written to {path}")
