"""A private network of hosts on one machine: one Linux network namespace per host, joined by a
bridge that lives in a namespace of its own, for fault tests that cut, slow or drop links.

Nothing touches the machine's own network: the bridge and every veth end sit in the run's
namespaces, and no namespace has a route anywhere else, so every address (``198.18.0.0/24``, the
range RFC 2544 sets aside for network tests) is reachable only from the run's own hosts.  Deleting
a namespace deletes its veth ends; :func:`remove_leftovers` kills the processes of a crashed run's
namespaces and deletes them.  Faults are nftables rules (a table per fault, so healing one is one
``delete table``), a veth set down, and ``tc`` queueing disciplines (``netem`` where the kernel has
it, else a token bucket that slows the link).  Needs root, iproute2 and nftables.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from sluice.embedded.processes import ProcessError

__all__ = ["Topology", "remove_leftovers"]

SUBNET = "198.18.0"
PREFIX = "slch"  # namespace names: slch<pid>-<host>, the pid of the run that made them
HOST_NAME = re.compile(r"^[a-z][a-z0-9]{0,9}$")


def _run(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(list(args), capture_output=True, text=True, input=stdin)
    if check and result.returncode != 0:
        raise ProcessError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _run("ip", "netns", "list").stdout.splitlines() if line.strip()]


def _kill_namespace(ns: str) -> None:
    """SIGKILL every process in ``ns`` (what the run started there, and their children), then delete it."""
    for pid in _run("ip", "netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _run("ip", "netns", "delete", ns, check=False)


def remove_leftovers() -> list[str]:
    """Delete the namespaces (and kill the processes) of runs whose process is gone; returns their names."""
    gone = []
    for ns in _namespaces():
        match = re.match(rf"^{PREFIX}(\d+)-", ns)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            _kill_namespace(ns)
            gone.append(ns)
    return gone


@dataclass
class Topology:
    """Hosts on one bridge: ``hosts`` maps a host's name to its address.

    :param names: the hosts, in address order (``.1`` up); lower-case, at most 10 characters.
    """

    names: Sequence[str]
    hosts: dict[str, str] = field(default_factory=dict)
    run: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    _faults: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def ns(self, host: str) -> str:
        return f"{self.run}-{host}"

    @property
    def switch(self) -> str:
        return f"{self.run}-sw"

    def up(self) -> Topology:
        """Build the namespaces, the bridge and one veth per host (any namespace of this run is replaced)."""
        bad = [name for name in self.names if not HOST_NAME.match(name) or name == "sw"]
        if bad:
            raise ProcessError(f"host names {bad} are not allowed: use 1-10 lower-case letters and digits, not 'sw'")
        self.down()
        _run("ip", "netns", "add", self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for index, host in enumerate(self.names, start=1):
            ns, port = self.ns(host), f"v-{host}"
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", self.switch)
            _run("ip", "-n", ns, "addr", "add", f"{SUBNET}.{index}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", self.switch, "link", "set", port, "master", "br0")
            _run("ip", "-n", self.switch, "link", "set", port, "up")
            self.hosts[host] = f"{SUBNET}.{index}"
        return self

    def down(self) -> None:
        """Kill every process in this run's namespaces and delete them (and so their veths)."""
        for ns in _namespaces():
            if ns.startswith(f"{self.run}-"):
                _kill_namespace(ns)
        self._faults.clear()

    def command(self, host: str, args: Sequence[str]) -> list[str]:
        """``args`` run on ``host``: ``ip netns exec`` joins the namespace and execs, so the pid is the command's."""
        return ["ip", "netns", "exec", self.ns(host), *args]

    # Faults: each has a name; heal(name) undoes it.

    def isolate(self, name: str, host: str) -> None:
        """Cut ``host`` off: its port on the bridge goes down."""
        self._apply(name, ("link", host), ("ip", "-n", self.switch, "link", "set", f"v-{host}", "down"))

    def drop(self, name: str, source: str, target: str) -> None:
        """Drop what ``source`` sends to ``target`` (one direction: ``target``'s packets still arrive)."""
        table = _table(name)
        self._nft(name, source, table, {"output": f"ip daddr {self.hosts[target]} drop"})

    def degrade(self, name: str, host: str, delay_ms: int, loss_percent: int) -> None:
        """Slow ``host``'s link both ways and lose ``loss_percent`` % of its packets.

        ``netem`` delays each packet where the kernel has it; else a token bucket of 2 Mbit/s with up
        to ``delay_ms`` of queue delays a busy link, and nftables drops at random.
        """
        table = _table(name)
        if not 0 <= loss_percent <= 100:
            raise ProcessError(f"loss_percent must be between 0 and 100, got {loss_percent}")
        lose = "drop" if loss_percent == 100 else f"numgen random mod 100 < {loss_percent} drop"
        self._nft(name, host, table, {"input": lose, "output": lose})
        for ns, dev in ((self.ns(host), "eth0"), (self.switch, f"v-{host}")):
            netem = _run(
                "ip",
                "netns",
                "exec",
                ns,
                "tc",
                "qdisc",
                "replace",
                "dev",
                dev,
                "root",
                "netem",
                "delay",
                f"{delay_ms}ms",
                check=False,
            )
            if netem.returncode != 0:
                _run(
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "tc",
                    "qdisc",
                    "replace",
                    "dev",
                    dev,
                    "root",
                    "tbf",
                    "rate",
                    "2mbit",
                    "burst",
                    "32kbit",
                    "latency",
                    f"{delay_ms}ms",
                )
        self._faults[name + "/tc"] = ("tc", host)

    def heal(self, name: str) -> None:
        """Undo the fault ``name`` (and its queueing disciplines); healing a healed fault is a no-op."""
        for key in (name, name + "/tc"):
            fault = self._faults.pop(key, None)
            if fault is None:
                continue
            if fault[0] == "link":
                _run("ip", "-n", self.switch, "link", "set", f"v-{fault[1]}", "up")
            elif fault[0] == "nft":
                _run("ip", "netns", "exec", self.ns(fault[1]), "nft", "delete", "table", "inet", fault[2], check=False)
            else:
                for ns, dev in ((self.ns(fault[1]), "eth0"), (self.switch, f"v-{fault[1]}")):
                    _run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)

    def heal_all(self) -> None:
        for name in list(self._faults):
            self.heal(name.removesuffix("/tc"))

    def _apply(self, name: str, fault: tuple[str, ...], args: tuple[str, ...]) -> None:
        _run(*args)
        self._faults[name] = fault

    def _nft(self, name: str, host: str, table: str, rules: dict[str, str]) -> None:
        """A table of its own on ``host``: one filter chain per hook, holding one rule."""
        chains = "".join(
            f"  chain {hook} {{\n    type filter hook {hook} priority 0;\n    {rule}\n  }}\n"
            for hook, rule in rules.items()
        )
        _run("ip", "netns", "exec", self.ns(host), "nft", "-f", "-", stdin=f"table inet {table} {{\n{chains}}}\n")
        self._faults[name] = ("nft", host, table)


def _table(name: str) -> str:
    return "chaos_" + re.sub(r"[^a-z0-9_]", "_", name.lower())
