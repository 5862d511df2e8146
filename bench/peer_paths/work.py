"""What every path shares: the records, the per-record function at two weights, the sink (a count
and a checksum, verified against what was produced), and the process-tree meter (peak RSS, CPU).

A record's value is JSON, ``{"i": i, "v": i % 1000, "t": produced, "pad": ...}``; ``t`` is the
producer's wall clock when it appended the record, so a sink's latency is its clock minus ``t``
(one machine, one clock).  The weights:

* light: parse the JSON and take ``v`` (the sink sums it);
* heavy: parse, then ``spins`` rounds of an integer recurrence seeded with ``v``: about 100 µs of
  pure Python, ``spins`` calibrated once per run by :func:`calibrate` and handed to every path.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

HEAVY_US = 100.0
SAMPLE = 10  # latency is noted for every SAMPLE-th record
_PAD = "x" * 40  # every value's padding


def light(value: bytes | str) -> tuple[int, int, float]:
    """(checksum term, record number, produced time) of one record."""
    d = json.loads(value)
    return d["v"], d["i"], d["t"]


def spin(seed: int, spins: int) -> int:
    """Pure-Python integer work: ``spins`` rounds of a linear congruential recurrence."""
    h = seed
    for _ in range(spins):
        h = (h * 1103515245 + 12345) & 0x7FFFFFFF
    return h


def heavy_fn(spins: int) -> Callable[[bytes | str], tuple[int, int, float]]:
    def heavy(value: bytes | str) -> tuple[int, int, float]:
        d = json.loads(value)
        return spin(d["v"], spins), d["i"], d["t"]

    return heavy


def per_record(weight: str, spins: int) -> Callable[[bytes | str], tuple[int, int, float]]:
    """The function a path runs on every record's value."""
    if weight == "light":
        return light
    if weight == "heavy":
        return heavy_fn(spins)
    raise ValueError(f"weight must be light or heavy, got {weight!r}")


def calibrate(target_us: float = HEAVY_US) -> int:
    """Spins that take ``target_us`` here, the best of a few timings (the machine is shared)."""
    n = 20_000
    best = min(_timed(lambda: spin(7, n)) for _ in range(5))
    return max(1, round(n * target_us / 1e6 / best))


def _timed(call: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def value(i: int, produced: float) -> bytes:
    """Record ``i``'s JSON value, as ``json.dumps`` writes it, in a third of its time: a latency
    run's producer is one Python process, and the fastest paths' 80 % is more than it can offer."""
    return f'{{"i": {i}, "v": {i % 1000}, "t": {produced!r}, "pad": "{_PAD}"}}'.encode()


def expected_checksum(weight: str, spins: int, records: int) -> int:
    """The checksum of records ``0..records-1`` (``v`` repeats every 1,000 records, so each term is
    computed once)."""
    terms = [v if weight == "light" else spin(v, spins) for v in range(1000)]
    full, rest = divmod(records, 1000)
    return full * sum(terms) + sum(terms[:rest])


@dataclass
class Sink:
    """A count, a checksum, the first record's time and the last output's, latencies of sampled records.

    Thread-safe (Quix and Faust call it from their own threads or tasks); a batch engine adds a whole
    batch's partial sums at once (:meth:`add_batch`), so its records' output time is the batch's end.
    """

    expected: int
    count: int = 0
    checksum: int = 0
    first: float | None = None
    last: float | None = None
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (produced, ms to output)
    done: threading.Event = field(default_factory=threading.Event)
    warm_count: int = 0  # a rate run's warm-up records: once all are out, ``warmed`` is set ...
    warmed: Any = None  # ... (its producer's event, across processes) ...
    warmed_at: float | None = None  # ... at this time, the timed part's start
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, term: int, i: int, produced: float) -> None:
        now = time.time()
        with self._lock:
            if self.first is None:
                self.first = now
            self.count += 1
            self.checksum += term
            if i % SAMPLE == 0:
                self.latencies.append((produced, (now - produced) * 1000))
            self._reached(now)

    def _reached(self, now: float) -> None:
        if self.warmed_at is None and self.count >= self.warm_count:  # once, not per record
            self.warmed_at = now
            if self.warmed is not None:
                self.warmed.set()
        if self.count >= self.expected and self.last is None:  # later batches are past the window
            self.last = now
            self.done.set()

    def add_batch(self, count: int, checksum: int, first: float | None, produced: Iterable[float]) -> None:
        now = time.time()
        with self._lock:
            if first is not None and (self.first is None or first < self.first):
                self.first = first
            self.count += count
            self.checksum += checksum
            self.latencies.extend((t, (now - t) * 1000) for t in produced)
            self._reached(now)

    def result(self) -> dict[str, Any]:
        if self.first is None or self.last is None:
            raise RuntimeError(f"the sink saw {self.count} of {self.expected} records")
        return {
            "count": self.count,
            "checksum": self.checksum,
            "seconds": self.last - self.first,
            "first": self.first,
            "last": self.last,
        }


def partition_sums(fn: Callable[[bytes | str], tuple[int, int, float]], values: Iterable[Any]) -> tuple:
    """One Spark partition's (count, checksum, first record's time, produced times of the sampled)."""
    n = total = 0
    first: float | None = None
    sampled: list[float] = []
    for v in values:
        if first is None:
            first = time.time()
        term, i, produced = fn(v)
        n += 1
        total += term
        if i % SAMPLE == 0:
            sampled.append(produced)
    return n, total, first, sampled


class TreeMeter:
    """Peak RSS of a process and all its descendants (JVMs, Python workers, services), sampled, and
    their CPU seconds over a window given afterwards by wall-clock times (a batch engine learns its
    first record's time only from the batch that carried it).  ``exclude``: pids not to count (the
    rate-limited producer a worker runs for the latency runs); ``roots``: more trees to count, not
    this process's descendants (a standalone cluster's master and workers, and so its executors)."""

    def __init__(self, period: float = 0.2, roots: Iterable[int] = ()) -> None:
        import psutil

        self._psutil = psutil
        self.root = psutil.Process(os.getpid())
        self.roots = list(roots)
        self.period = period
        self.exclude: set[int] = set()
        self.peak_rss = 0
        self.processes = 0
        self._cpu: dict[int, float] = {}  # last CPU seconds seen per pid (a dead pid keeps its last)
        self._samples: list[tuple[float, float]] = []  # (wall time, CPU seconds of the tree so far)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-meter", daemon=True)

    def start(self) -> TreeMeter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def sample(self) -> None:
        psutil = self._psutil
        rss = 0
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        for pid in self.roots:
            try:
                root = psutil.Process(pid)
                tree += [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
        alive = 0
        for p in tree:
            if p.pid in self.exclude:
                continue
            try:
                with p.oneshot():
                    rss += p.memory_info().rss
                    t = p.cpu_times()
                    self._cpu[p.pid] = t.user + t.system
                    alive += 1
            except psutil.Error:
                continue
        self.peak_rss = max(self.peak_rss, rss)
        self.processes = max(self.processes, alive)
        self._samples.append((time.time(), sum(self._cpu.values())))

    def cpu_between(self, start: float, end: float) -> float:
        """CPU seconds of the tree from ``start`` to ``end`` (wall clock), from the nearest samples."""

        def at(t: float) -> float:
            before = [c for s, c in self._samples if s <= t]
            return before[-1] if before else self._samples[0][1]

        return max(0.0, at(end + self.period) - at(start))
