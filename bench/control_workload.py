"""What ``bench/control.py`` offers and asks of the systems it compares: the lines a receiver reads
(:class:`LineServer`), the speed the batch function runs at (:class:`CapacityFlag`, moved along a
scenario's profile) and what a batch of a given size costs (:class:`Workload`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


def wall_ms() -> float:
    return time.time() * 1000.0


class LineServer:
    """Serves newline-terminated lines to one client, at most ``rate`` lines/s (a thread).

    The client sets the pace when it reads slower: ``sendall`` blocks on a full socket buffer, so
    the source is saturated, never flooded.  ``connected_ms`` is when the client connected (the
    run's origin: capacity changes are timed from it).
    """

    LINE = b"sluice line " + b"x" * 20 + b"\n"
    CHUNK_LINES = 250

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.connected = threading.Event()
        self.connected_ms = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="line-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with self._listener:
            conn, _ = self._listener.accept()
        self.connected_ms = wall_ms()
        self.connected.set()
        chunk, sent, start = self.LINE * self.CHUNK_LINES, 0, time.monotonic()
        with conn:
            try:
                while not self._stop.is_set():
                    conn.sendall(chunk)
                    sent += self.CHUNK_LINES
                    ahead = sent / self.rate - (time.monotonic() - start)
                    if ahead > 0:
                        self._stop.wait(ahead)
            except OSError:
                pass  # the client went away: the run is over

    def stop(self) -> None:
        self._stop.set()
        try:
            self._listener.close()
        except OSError:
            pass


class CapacityFlag:
    """The speed the batch function runs at (1.0: its base cost per record), moved along
    ``profile(seconds since the origin)`` by a timer thread every 50 ms once ``start`` is called."""

    def __init__(self, profile: Callable[[float], float]) -> None:
        self.profile = profile
        self.speed = profile(0.0)
        self.origin_ms = 0.0
        self._stop = threading.Event()

    def start(self, origin_ms: float) -> None:
        self.origin_ms = origin_ms
        threading.Thread(target=self._follow, name="capacity", daemon=True).start()

    def _follow(self) -> None:
        while not self._stop.wait(0.05):
            self.speed = self.profile((wall_ms() - self.origin_ms) / 1000.0)

    def stop(self) -> None:
        self._stop.set()


@dataclass(frozen=True)
class Workload:
    """What a batch costs: ``cost_ms`` per record at speed 1; past ``cliff_records`` records in
    one batch each further record costs ``cliff_factor`` times as much (a spill)."""

    cost_ms: float
    cliff_records: int | None = None
    cliff_factor: float = 1.0

    def work_ms(self, records: float) -> float:
        work = self.cost_ms * records
        if self.cliff_records is not None and records > self.cliff_records:
            work += self.cost_ms * (self.cliff_factor - 1.0) * (records - self.cliff_records)
        return work

    def capacity_records(self, budget_ms: float, speed: float) -> float:
        """The most records whose work fits ``budget_ms`` at ``speed`` (the work is convex)."""
        if budget_ms <= 0:
            return 0.0
        linear = budget_ms * speed / self.cost_ms
        if self.cliff_records is None or linear <= self.cliff_records:
            return linear
        return self.cliff_records + (linear - self.cliff_records) / self.cliff_factor
