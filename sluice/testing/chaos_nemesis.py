"""The fault campaign's nemesis: a schedule of faults drawn from a seed, and what each fault does.

The schedule is a pure function of the seed and the campaign's length, printed before the run, so
a failing campaign is replayed with the same ``--seed``.  Faults come in bursts: within one they
begin at random moments and overlap, at most ``max_concurrent`` at once and never two on the same
target; between two, ``quiet`` seconds pass with none, so what the pipeline does once every fault
has healed is seen before the next burst (a fault beginning meanwhile would be measured as slow
recovery).  Each one heals before the campaign's end.  With a single tracker, killing it means
killing it and starting it again on the same host with its write-ahead log kept (that log is its
only copy); with a standby on a shared log, the tracker loses its working directory as any host
may, and the standby is a target too.
"""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass

from sluice.errors import InvalidArgument
from sluice.testing.chaos_cluster import ChaosCluster

__all__ = ["KINDS", "Fault", "Nemesis", "schedule"]

KINDS = ("kill", "pause", "isolate", "drop", "slow_store", "store_down", "broker_restart")
KILLABLE = ("tracker", "recv1", "recv2", "worker1", "worker2", "driver")
PAUSABLE = (*KILLABLE, "broker", "master")
ISOLATABLE = ("tracker", "recv1", "recv2", "worker1", "worker2", "driver", "broker")
#: One direction of a link: what the first host sends to the second is dropped.
LINKS = (
    ("recv1", "tracker"),
    ("tracker", "recv2"),
    ("driver", "tracker"),
    ("tracker", "driver"),
    ("recv1", "store"),
    ("store", "recv2"),
    ("worker1", "store"),
    ("driver", "worker2"),
    ("worker1", "driver"),
    ("recv2", "broker"),
    ("broker", "recv1"),
)


@dataclass(frozen=True)
class Fault:
    """One fault: from ``at`` seconds into the campaign for ``duration`` seconds."""

    at: float
    kind: str
    target: str
    duration: float
    wipe: bool = False  # kill: the working directory goes too

    @property
    def until(self) -> float:
        return self.at + self.duration

    @property
    def hosts(self) -> tuple[str, ...]:
        """What the fault occupies (no other fault touches it meanwhile)."""
        if self.kind in ("slow_store", "store_down"):
            return ("store",)
        if self.kind == "broker_restart":
            return ("broker",)
        return tuple(self.target.split(">"))

    def __str__(self) -> str:
        wipe = " with its working directory" if self.wipe else ""
        return f"{self.at:7.1f}s +{self.duration:4.1f}s {self.kind} {self.target}{wipe}"


def schedule(
    seed: int,
    seconds: float,
    mean_gap: float = 3.0,
    max_concurrent: int = 2,
    standby: bool = False,
    quiet: float = 30.0,
    burst: float = 60.0,
) -> list[Fault]:
    """Faults from 10 s in until every one heals 10 s before ``seconds``, about every ``mean_gap`` s
    within a burst; a burst begins ``quiet`` s after the last one healed and takes new faults for
    ``burst`` s at most.  With a ``standby`` tracker, it is a target as the leader is."""
    if seconds < 40 or mean_gap <= 0 or max_concurrent < 1 or quiet < 0 or burst <= 0:
        raise InvalidArgument(
            "a campaign needs seconds >= 40, mean_gap > 0, max_concurrent >= 1, quiet >= 0, burst > 0: "
            f"got {seconds}, {mean_gap}, {max_concurrent}, {quiet}, {burst}"
        )
    rng = random.Random(seed)
    extra = ("tracker2",) if standby else ()
    killable, pausable, isolatable = (*KILLABLE, *extra), (*PAUSABLE, *extra), (*ISOLATABLE, *extra)
    links = (*LINKS, *((("recv2", "tracker2"), ("tracker2", "store")) if standby else ()))
    faults: list[Fault] = []
    t, end = 10.0, seconds - 10
    began = t
    while True:
        t = round(t + rng.expovariate(1 / mean_gap), 1)
        healed = max((f.until for f in faults), default=t)
        if t >= healed or t - began >= burst:  # the burst is over: the next one after a quiet time
            t = began = max(t, healed + quiet) if faults else t
        kind = rng.choice(KINDS)
        wipe = False
        if kind == "kill":
            target = rng.choice(killable)
            wipe = rng.random() < 0.5
        elif kind == "pause":
            target = rng.choice(pausable)
        elif kind == "isolate":
            target = rng.choice(isolatable)
        elif kind == "drop":
            target = ">".join(rng.choice(links))
        else:
            target = "store" if kind != "broker_restart" else "broker"
        duration = rng.uniform(1, 4) if kind == "broker_restart" else rng.uniform(3, 20)
        if t >= end - 1:
            return faults
        fault = Fault(t, kind, target, round(min(duration, end - t), 1), wipe)
        active = [f for f in faults if f.until > fault.at]
        busy = {h for f in active for h in f.hosts}
        if len(active) < max_concurrent and not busy & set(fault.hosts):
            faults.append(fault)


class Nemesis:
    """Begins and ends faults on a running :class:`ChaosCluster`."""

    def __init__(self, cluster: ChaosCluster) -> None:
        self.cluster = cluster

    def begin(self, index: int, fault: Fault) -> None:
        c, name = self.cluster, f"f{index}"
        if fault.kind in ("kill", "broker_restart"):
            c.services[fault.target].held += 1
            c.kill(fault.target, fault.wipe)
        elif fault.kind == "pause":
            c.services[fault.target].held += 1  # a stopped process is not restarted meanwhile
            c.signal(fault.target, signal.SIGSTOP)
        elif fault.kind == "isolate":
            c.net.isolate(name, fault.target)
        elif fault.kind == "drop":
            source, target = fault.target.split(">")
            c.net.drop(name, source, target)
        elif fault.kind == "slow_store":
            c.net.degrade(name, "store", delay_ms=300, loss_percent=5)
        elif fault.kind == "store_down":
            c.net.isolate(name, "store")

    def end(self, index: int, fault: Fault) -> None:
        c = self.cluster
        if fault.kind in ("kill", "broker_restart"):
            c.services[fault.target].held -= 1  # the supervisor starts it again
        elif fault.kind == "pause":
            c.signal(fault.target, signal.SIGCONT)
            c.services[fault.target].held -= 1
        else:
            c.net.heal(f"f{index}")
