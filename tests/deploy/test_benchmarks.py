"""The benchmarks run from a fresh checkout as documented: each one's quick mode runs and prints
only JSON lines on stdout, each with its figures' spread, the machine's load and, beside a peer,
the peer's figures and ``ratio``.  The figures themselves are not judged here (a smoke run is no
evidence); that they are produced, shaped alike, is."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tests.deploy.conftest import REPO

BENCH = REPO / "bench"
# modules the benches import, not benches
HELPERS = {"harness.py", "control_runs.py", "control_workload.py", "receiver_memory.py", "receiver_timing.py"}

# Each bench's quick mode, cut to its smallest meaningful run (Spark starts once; the broker is the
# worker's, ON_THE_BROKER).  The peers bench runs a Sluice path and the Python peer its ratios need;
# the Spark Kafka bench measures the DataFrame-only workload, its warm-up reads with the light function.
QUICK = {
    "arena.py": ["--scenarios", "step_up", "--estimators", "pid,adaptive"],
    "block_store.py": [],
    "control.py": ["--scenarios", "cold_start", "--estimators", "pid", "--no-peer", "--seconds", "2"],
    "direct.py": ["--records", "400", "--batches", "1"],
    "driver.py": ["--only", "rdd", "--records", "400"],
    "estimators.py": [],
    "header_memory.py": ["--rounds", "1"],
    "kafka_sink.py": ["--partitions", "2"],
    "latency.py": ["--capacity", "4000", "--seconds", "1"],
    "latency_target.py": [],
    "peers.py": ["--weights", "light", "--paths", "sluice-direct,bytewax"],
    "peers_scale.py": ["--paths", "sluice-direct", "--peers", "bytewax"],
    "receiver.py": ["--records", "2000"],
    "scaling.py": [],
    "structured.py": ["--cap", "200", "--fast", "1", "--slow-batches", "3", "--trigger-ms", "500"],
    "tracker.py": ["--blocks", "400", "--alloc-blocks", "200"],
    "tracker_ha.py": ["--blocks", "200"],
    "vs_spark.py": ["--seconds", "2"],
    "vs_spark_kafka.py": ["--workloads", "dataframe"],
}
# The benches on Kafka read and write the worker's broker (``--bootstrap``, fresh topics of their own)
# instead of starting Apache Kafka's JVM each; receiver.py starts its own, as it counts the broker's CPU.
ON_THE_BROKER = {
    "direct.py",
    "kafka_sink.py",
    "latency.py",
    "peers.py",
    "peers_scale.py",
    "scaling.py",
    "vs_spark_kafka.py",
}
# A smoke run's limit, a bound on a hang rather than a figure.  Alone on a two-core machine (load 2
# to 3) a quick run took 35 s at most, and up to five times as long beside other tiers or on a
# machine running at half speed.  Three take more than one start of a JVM application and get more:
# the Spark Kafka bench's query plans and Python workers start with each source's warm-up read
# before its measured one, the peers bench starts a Spark driver for each run of its Sluice path (a
# backlog run, then a latency run), the scale-out bench a standalone cluster and then an application
# on it.
TIMEOUT, LONGER = 300, {"peers_scale.py": 480, "peers.py": 480, "vs_spark_kafka.py": 480}

# The smoke runs mostly wait (a JVM starting, child processes), so `make test` runs them two at a
# time, each on a pytest-xdist worker of its own, longest first so that the longest do not start
# last: tests/conftest.py orders them by the seconds of the last full run (tests/durations.json),
# and for a bench that file does not know yet keeps this order (their seconds in a smoke tier run).
LONGEST_FIRST = (
    "vs_spark_kafka.py",
    "peers.py",
    "peers_scale.py",
    "structured.py",
    "latency.py",
    "vs_spark.py",
    "latency_target.py",
    "driver.py",
    "tracker_ha.py",
    "direct.py",
    "scaling.py",
    "control.py",
)


def benches() -> list[str]:
    return sorted(p.name for p in BENCH.glob("*.py") if p.name not in HELPERS)


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_a_benchmark_imports_only_sluice_and_the_harness(path) -> None:
    """No test module, no ``sys.path`` patching: Sluice is installed and ``bench/`` is the script's folder."""
    tree = ast.parse(path.read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "tests" not in imported
    assert "sys.path" not in path.read_text()


# Benches another test runs whole, checking their JSON line: a second run here would only cost time
# (the fault campaign starts services on eleven hosts).
RUN_ELSEWHERE = {"chaos.py": "tests/chaos/test_campaign.py"}


def test_every_bench_has_a_smoke_run() -> None:
    assert sorted([*QUICK, *RUN_ELSEWHERE]) == benches()
    assert all((REPO / test).exists() for test in RUN_ELSEWHERE.values())


def test_every_bench_that_takes_a_broker_gets_the_workers() -> None:
    takes = {p.name for p in BENCH.glob("*.py") if p.name != "harness.py" and "add_bootstrap(" in p.read_text()}
    assert takes == ON_THE_BROKER


def check_line(line: dict, name: str) -> None:
    """The shape every figure line shares (see bench/harness.py)."""
    assert line["bench"] == name.removesuffix(".py"), line
    assert len(line["load_average"]) == 3
    if "figure" not in line:
        return  # a bench's summary line
    assert {"median", "min", "max", "runs"} <= set(line), line
    if isinstance(line["median"], dict):  # several fields per figure
        assert line["runs"] and set(line["median"]) == set(line["min"]) == set(line["max"])
    else:
        assert line["min"] <= line["median"] <= line["max"] and len(line["runs"]) >= 1
    if "peer" in line:
        assert "ratio" in line and {"median", "min", "max"} <= set(line["peer"]), line


def run_quick(name: str, bootstrap: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(BENCH / name),
            "--quick",
            *QUICK[name],
            *(["--bootstrap", bootstrap] if bootstrap else []),
        ],
        capture_output=True,
        text=True,
        timeout=LONGER.get(name, TIMEOUT),
        cwd=REPO,
    )


def longest_first(names: list[str]) -> list[str]:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    return sorted(names, key=lambda name: (rank.get(name, len(rank)), name))


@pytest.mark.smoke
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", longest_first(sorted(QUICK)))
def test_a_benchmark_runs_quick_and_prints_json_lines(name: str, request: pytest.FixtureRequest) -> None:
    broker = request.getfixturevalue("kafka_broker") if name in ON_THE_BROKER else None
    result = run_quick(name, broker.bootstrap if broker else None)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(text) for text in result.stdout.splitlines()]
    assert lines, f"{name} printed no JSON line; stderr: {result.stderr[-2000:]}"
    for line in lines:
        check_line(line, name)
    assert any("figure" in line for line in lines)
    if name == "latency.py":  # every sampled record the producer wrote was seen by the batch function
        assert all(line["unseen_records"] == [0] for line in lines if "figure" in line), lines
    if name == "peers.py":  # each path's latency at the quick run's one load, with the rate its producer offered
        latency = {(line["path"], line["figure"].split(",")[0]) for line in lines if "latency at" in line["figure"]}
        for path in QUICK[name][QUICK[name].index("--paths") + 1].split(","):
            assert {(path, f"light: p{q} latency at 80%") for q in (50, 99)} <= latency, lines
        assert all(line["offered_rate"] > 0 for line in lines if "latency at" in line["figure"])


@pytest.fixture
def harness(monkeypatch):
    """bench/harness.py as a bench imports it (its folder first on the path)."""
    monkeypatch.syspath_prepend(str(BENCH))
    import harness

    return harness


def test_rounds_alternate_and_a_figure_carries_spread_peer_ratio_target_and_load(harness, capsys) -> None:
    calls: list[str] = []

    def ours(r: int) -> float:
        calls.append("ours")
        return 10.0 + r

    def peer(r: int) -> float:
        calls.append("peer")
        return 4.0

    values = harness.alternate(3, {"ours": ours, "peer": peer})
    assert calls == ["ours", "peer", "peer", "ours", "ours", "peer"]  # no side always first
    line = harness.figure("x", "f", "u", values["ours"], peer=values["peer"], peer_name="p", target=">= 3")
    printed = json.loads(capsys.readouterr().out)
    assert printed == line
    assert (line["median"], line["min"], line["max"], line["runs"]) == (11.0, 10.0, 12.0, [10.0, 11.0, 12.0])
    assert line["peer"]["median"] == 4.0 and line["ratio"] == 2.75
    assert line["target"] == "ratio >= 3" and line["met"] is False
    assert len(line["load_average"]) == 3
    assert harness.figure("x", "f", "ms", [30.0], target="<= 20", target_of="median")["met"] is False


def test_several_fields_count_never_as_the_largest(harness, capsys) -> None:
    runs = [{"a": 1, "b": None}, {"a": 3, "b": 5}, {"a": 2, "b": None}]
    line = harness.fields_figure("x", "f", runs, ("a", "b"), peer_runs=[{"a": 4, "b": 5}], peer_name="p")
    assert line["median"] == {"a": 2, "b": None} and line["max"] == {"a": 3, "b": None}
    assert line["min"] == {"a": 1, "b": 5} and line["ratio"] == {"a": 0.5, "b": None}


def test_the_peers_records_are_what_json_dumps_writes(monkeypatch) -> None:
    """bench/peer_paths/work.py's ``value`` formats by hand for the producer's speed; every path
    parses it as JSON and the checksum reads its fields, so it must stay byte for byte json.dumps."""
    monkeypatch.syspath_prepend(str(BENCH))
    from peer_paths.work import value

    for i, produced in ((0, 0.0), (999, 1.5), (123_456_789, 1764334234.123456), (7, 1e-7), (1001, 3.0e9)):
        as_json = json.dumps({"i": i, "v": i % 1000, "t": produced, "pad": "x" * 40}).encode()
        assert value(i, produced) == as_json


def test_a_latency_run_too_short_to_measure_is_refused() -> None:
    """The peers bench takes latency from a second into each rate run on: a run of a second or less
    would leave nothing (or a few records, by chance) to measure, so it is refused before it starts."""
    result = subprocess.run(
        [sys.executable, str(BENCH / "peers.py"), "--seconds", "1"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 2 and not result.stdout
    assert "--seconds must be more than 1" in result.stderr
