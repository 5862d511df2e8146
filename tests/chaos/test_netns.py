"""The campaign's network: hosts that reach each other, faults that cut exactly what they say and
heal, and no namespace or process left behind, whether a run ends, is interrupted or is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.embedded.processes import wait_until
from sluice.testing.netns import Topology, remove_leftovers

pytestmark = [pytest.mark.slow]


def namespaces() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split()


def running(pids: list[str]) -> list[str]:
    """The pids still running (a zombie waits for its parent, but runs no more)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def connects(net: Topology, source: str, target: str, port: int) -> bool:
    probe = f"</dev/tcp/{net.hosts[target]}/{port}"
    return (
        subprocess.run(net.command(source, ["timeout", "1", "bash", "-c", probe]), stderr=subprocess.DEVNULL).returncode
        == 0
    )


@pytest.fixture
def net():
    net = Topology(["a", "b", "c"]).up()
    servers = [
        subprocess.Popen(
            net.command(host, [sys.executable, "-m", "http.server", "8000", "--bind", net.hosts[host]]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for host in ("a", "b")
    ]
    try:
        wait_until(lambda: connects(net, "c", "a", 8000) and connects(net, "c", "b", 8000), "the servers", 30, servers)
        yield net
    finally:
        net.down()
        for server in servers:
            server.wait(10)


def test_faults_cut_what_they_name_and_heal(net: Topology) -> None:
    assert net.hosts == {"a": "198.18.0.1", "b": "198.18.0.2", "c": "198.18.0.3"}
    net.isolate("f1", "a")
    assert not connects(net, "c", "a", 8000) and connects(net, "c", "b", 8000)
    net.heal("f1")
    assert connects(net, "c", "a", 8000)
    net.drop("f2", "c", "a")  # c's packets to a are dropped; b still reaches a, a still reaches b
    assert not connects(net, "c", "a", 8000) and connects(net, "b", "a", 8000) and connects(net, "a", "b", 8000)
    net.heal("f2")
    net.heal("f2")  # healing a healed fault does nothing
    assert connects(net, "c", "a", 8000)
    net.degrade("f3", "a", delay_ms=200, loss_percent=100)
    assert not connects(net, "c", "a", 8000)
    net.heal_all()
    assert connects(net, "c", "a", 8000)


def test_bad_host_names_are_refused() -> None:
    with pytest.raises(Exception, match="host names \\['Big-host'\\] are not allowed"):
        Topology(["Big-host"]).up()


# The namespaces of a run are named by its pid, so runs side by side keep apart; but this one leaves a
# dead run's namespaces on purpose, and every campaign removes any dead run's when it starts and
# asserts none is left when it ends (tests/chaos/test_campaign.py, test_high_availability.py).
@pytest.mark.alone("leaves a dead run's namespaces, which any campaign running meanwhile would remove or count")
def test_a_killed_run_leaves_namespaces_that_the_next_one_removes_with_their_processes() -> None:
    script = (
        "import subprocess, sys, time\n"
        "from sluice.testing.netns import Topology\n"
        "net = Topology(['x']).up()\n"
        "subprocess.Popen(net.command('x', ['sleep', '600']), start_new_session=True)\n"
        "print(net.run, flush=True)\n"
        "time.sleep(600)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None
    name = run.stdout.readline().strip()

    def in_namespace() -> list[str]:
        """`ip netns exec` enters the namespace after its fork, so the sleeper shows up a moment later."""
        return subprocess.run(["ip", "netns", "pids", f"{name}-x"], capture_output=True, text=True).stdout.split()

    wait_until(lambda: bool(in_namespace()), "the sleeper inside the namespace", 10, [run])
    sleeper = in_namespace()
    assert f"{name}-x" in namespaces()
    run.kill()
    run.wait()
    assert f"{name}-x" in namespaces()
    assert {f"{name}-x", f"{name}-sw"} <= set(remove_leftovers())  # with any other killed run's
    assert not [ns for ns in namespaces() if ns.startswith(name)]
    wait_until(lambda: not running(sleeper), "the leftover's process killed", 10)


@pytest.mark.timeout(600)
def test_an_interrupted_campaign_removes_its_network_and_processes(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from sluice.testing.chaos_campaign import run_campaign\n"
        "run_campaign(Path(sys.argv[1]), 1, 60, say=lambda line: None)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stderr=subprocess.PIPE, text=True)
    prefix = f"slch{run.pid}-"
    wait_until(lambda: (tmp_path / "logs" / "broker.log").exists(), "services starting", 120, [run])
    pids = [
        p
        for ns in namespaces()
        if ns.startswith(prefix)
        for p in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    ]
    assert pids
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert "KeyboardInterrupt" in err
    assert not [ns for ns in namespaces() if ns.startswith(prefix)]
    wait_until(lambda: not running(pids), "the campaign's processes gone", 10)
