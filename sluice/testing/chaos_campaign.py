"""One fault campaign, start to end: the cluster up, the producer and the nemesis running for
``seconds``, every fault healed, the output drained, then the checker's figures.

The campaign is one loop in one thread: it begins and ends faults at their times, restarts what
exited (the supervisor), and samples every service's RSS.  Every exit path, SIGINT and SIGTERM
included, removes the network and every process of the run; a crashed run's leftovers are
removed when the next one starts.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from sluice.embedded.processes import start_process
from sluice.testing.chaos_check import Batch, check, percentile, read_output, recoveries, rss_growth
from sluice.testing.chaos_cluster import PY, ChaosCluster, standby_supported
from sluice.testing.chaos_nemesis import Fault, Nemesis, schedule
from sluice.testing.netns import remove_leftovers

__all__ = ["run_campaign"]

STALL_S = 30.0  # the output's missing offsets unchanged this long: ask whether they are holes


def tree_rss_kb(pid: int) -> int:
    """RSS of ``pid`` and its descendants (a driver's JVM, a worker's executor), in KiB."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM end the campaign through the ``finally`` that removes everything; once
    one has, the next are ignored until that is done (a second ^C, or ``timeout`` passing its signal
    on to the whole group, had interrupted the removal and left the namespaces behind).

        SIGINT is installed too, not left to Python's default: a process started in the background by a
        shell without job control inherits SIGINT ignored, and Python then leaves it ignored.
    """

    def stop(signum: int, frame: FrameType | None) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):  # the cleanup this starts must not be cut short
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_campaign(
    directory: Path,
    seed: int,
    seconds: float,
    rate: float = 50,
    mean_gap: float = 3.0,
    max_concurrent: int = 2,
    drain_timeout: float = 420,
    say: Callable[[str], None] = print,
    faults: list[Fault] | None = None,
) -> dict:
    """Run a campaign in ``directory`` and return the checker's figures (see :mod:`sluice.testing.chaos_check`).

    ``faults`` replaces the seeded schedule with these (a scenario named fault by fault)."""
    standby = standby_supported()
    origin = "faults as given" if faults is not None else f"seed {seed} (replay with --seed {seed})"
    if faults is None:
        faults = schedule(seed, seconds, mean_gap, max_concurrent, standby)
    trackers = "a leader and a standby tracker" if standby else "one tracker"
    say(f"chaos campaign: {seconds:.0f} s, {trackers}, {len(faults)} faults, {origin}")
    for fault in faults:
        say(f"  {fault}")
    for name in remove_leftovers():
        say(f"removed the leftover namespace {name}")
    cluster = ChaosCluster(directory, standby=standby)
    with _interruptible():
        try:
            cluster.up()
            return _run(cluster, faults, seed, seconds, rate, drain_timeout, say)
        finally:
            cluster.down()


def _run(
    cluster: ChaosCluster,
    faults: list[Fault],
    seed: int,
    seconds: float,
    rate: float,
    drain_timeout: float,
    say: Callable[[str], None],
) -> dict:
    nemesis, acked, ends_file = Nemesis(cluster), cluster.directory / "acked.txt", cluster.directory / "ends.json"
    topic = ["--bootstrap", cluster.bootstrap, "--topic", cluster.topic, "--partitions", str(cluster.partitions)]
    producer = start_process(
        cluster.net.command(
            "client",
            [
                PY,
                "-m",
                "sluice.testing.chaos_workload",
                "produce",
                *topic,
                "--out",
                str(acked),
                "--rate",
                str(rate),
                "--seconds",
                str(seconds),
            ],
        ),
        log=cluster.log("producer"),
        env=cluster.aws,
    )
    events = sorted([(f.at, 1, i) for i, f in enumerate(faults)] + [(f.until, 0, i) for i, f in enumerate(faults)])
    heals: list[float] = []
    settled: list[float] = []  # the healings that left no fault active: each burst's end
    active: set[int] = set()
    samples: list[tuple[float, str, int, int]] = []
    start = time.time()
    next_sample = start
    while events or time.time() - start < seconds:
        now = time.time()
        while events and events[0][0] <= now - start:
            _, begins, index = events.pop(0)
            if begins:
                nemesis.begin(index, faults[index])
                active.add(index)
            else:
                nemesis.end(index, faults[index])
                active.discard(index)
                heals.append(time.time())
                if not active:
                    settled.append(heals[-1])
            say(f"{now - start:7.1f}s {'begin' if begins else 'heal '} {faults[index]}")
        for name in cluster.supervise():
            say(f"{now - start:7.1f}s restarted {name}")
        if now >= next_sample:
            next_sample += 5
            samples += [
                (now, name, s.proc.pid, tree_rss_kb(s.proc.pid))
                for name, s in cluster.services.items()
                if s.alive and s.proc
            ]
        time.sleep(0.2)
    end = time.time()
    with (cluster.directory / "rss.jsonl").open("w") as kept:  # the samples, to judge them again later
        kept.writelines(json.dumps(sample) + "\n" for sample in samples)
    producer.wait(120)
    say(f"{time.time() - start:7.1f}s faults healed, producer done: asking the topic's end offsets")
    cluster.client("ends", *topic, "--out", str(ends_file), timeout=300)
    ends = {int(p): end for p, end in json.loads(ends_file.read_text()).items()}
    wanted = {(p, o) for p, end in ends.items() for o in range(end)}

    def pause() -> None:
        cluster.supervise()
        time.sleep(2)

    # the faults have healed: everything must come out
    drained, _ = _wait_drained(
        wanted, lambda: read_output(cluster.output), lambda b: _holes(cluster, ends, b, None), drain_timeout, pause
    )
    drained_by = read_output(cluster.output)
    say(f"{time.time() - start:7.1f}s output {'drained' if drained else 'NOT drained'}; waiting past retention")
    time.sleep(2 * cluster.remember_ms / 1000 + 2 * cluster.batch_interval_ms / 1000)  # past retention
    taken = None
    if not drained:  # what the receivers never took from Kafka is a backlog, not a loss
        taken_file = cluster.directory / "committed.json"
        cluster.client("committed", *topic, "--group", cluster.group, "--out", str(taken_file), timeout=120)
        taken = {int(p): offset for p, offset in json.loads(taken_file.read_text()).items()}
    batches = read_output(cluster.output)
    holes = _holes(cluster, ends, batches, taken)
    result = check(ends, [int(x) for x in acked.read_text().split()], batches, taken, holes)
    last_ts = max((ts for b in batches for *_, ts in b.rows), default=0)
    found = recoveries(settled, batches, until=last_ts / 1000)
    each = recoveries(heals, batches, until=last_ts / 1000)
    growth = rss_growth(samples, start, end)
    # moto keeps every object in memory, the topic's data included: it grows with what was written
    known = [g for name, g in growth.items() if g is not None and name != "store"]
    return {
        "seed": seed,
        "seconds": round(seconds),
        "faults": len(faults),
        **result,
        # every record out before the deadline: what was missing then was only holes (known after)
        "drained_in_time": drained or wanted - holes <= {(p, o) for b in drained_by for p, o, _, _ in b.rows},
        "blocks_left": int(cluster.client("keys", "blocks", "b/")),
        "log_objects": int(cluster.client("keys", "trackerlog", "wal/")) if cluster.standby else None,
        "restarts": {name: s.starts - 1 for name, s in cluster.services.items() if s.starts > 1},
        "bursts": len(settled),
        "recoveries": len(found),
        "recovery_p50_s": _round(percentile(found, 0.5)),
        "recovery_p99_s": _round(percentile(found, 0.99)),
        # from every healing, one with other faults still active included: it measures them too
        "recovery_each_healing_p50_s": _round(percentile(each, 0.5)),
        "recovery_each_healing_p99_s": _round(percentile(each, 0.99)),
        "rss_growth": max(known) if known else None,
        "rss_growth_by_service": growth,
        "store_rss_growth": growth.get("store"),
        "recovery_times_s": [round(x, 1) for x in found],
    }


def _wait_drained(
    wanted: set[tuple[int, int]],
    output: Callable[[], list[Batch]],
    holes_in: Callable[[list[Batch]], set[tuple[int, int]]],
    timeout: float,
    pause: Callable[[], None],
    clock: Callable[[], float] = time.monotonic,
) -> tuple[bool, set[tuple[int, int]]]:
    """Wait up to ``timeout`` s for the output to hold every ``wanted`` offset but the topic's holes;
    returns whether it did and the holes found.

    The holes are asked for (``holes_in``, a read of the topic) only once the offsets the output
    lacks have stayed the same for :data:`STALL_S`: while they shrink the pipeline is still at work,
    and a read per poll would cost more than the wait.  Without it, one hole kept every campaign
    waiting to its deadline.
    """
    deadline = clock() + timeout
    holes: set[tuple[int, int]] = set()
    lacking: set[tuple[int, int]] | None = None
    asked: set[tuple[int, int]] | None = None
    since = clock()
    while clock() < deadline:
        batches = output()
        missing = wanted - {(p, o) for b in batches for p, o, _, _ in b.rows}
        if missing <= holes:
            return True, holes
        if missing != lacking:
            lacking, since = missing, clock()
        elif clock() - since >= STALL_S and missing != asked:
            asked, holes = missing, holes_in(batches)
            continue
        pause()
    return False, holes


def _holes(
    cluster: ChaosCluster, ends: dict[int, int], batches: list, taken: dict[int, int] | None
) -> set[tuple[int, int]]:
    """The offsets the output lacks (below what the receivers took) at which the topic holds no
    record: tansu restarted mid-write can leave offsets with no record, so offsets are not always
    dense, and only a read of those few offsets tells a hole from a loss."""
    seen = {(p, o) for b in batches for p, o, _, _ in b.rows}
    spans: dict[int, list[list[int]]] = {}
    for p, end in ends.items():
        for o in range(min(end, taken[p]) if taken is not None else end):
            if (p, o) not in seen:
                if spans.get(p) and spans[p][-1][1] == o:
                    spans[p][-1][1] = o + 1
                else:
                    spans.setdefault(p, []).append([o, o + 1])
    if not spans:
        return set()
    asked, answer = cluster.directory / "gaps.json", cluster.directory / "present.json"
    asked.write_text(json.dumps(spans))
    cluster.client(
        "present",
        "--bootstrap",
        cluster.bootstrap,
        "--topic",
        cluster.topic,
        "--ranges",
        str(asked),
        "--out",
        str(answer),
        timeout=600,
    )
    held = {(int(p), o) for p, offsets in json.loads(answer.read_text()).items() for o in offsets}
    return {(p, o) for p, pieces in spans.items() for a, b in pieces for o in range(a, b)} - held


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
