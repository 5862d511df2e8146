"""The demo's pure parts: load profiles, the word count's per-block step, the live table and the
summary, the ports it picks, what ``make demo`` installs, and the one-line failures (missing Java, a
port in use, a bad profile) of the real ``sluice-demo``."""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sluice.demo.app import count_partition
from sluice.demo.load import make_values
from sluice.demo.pipeline import METRICS_PORT, TRACKER_PORT, Ports
from sluice.demo.processes import DemoError, check_port_free
from sluice.demo.profile import ProfileError, parse
from sluice.demo.report import (
    BatchRow,
    LiveTable,
    Series,
    batches_to_steady,
    control,
    describe_control,
    format_summary,
    summarize,
)
from sluice.records import Record
from tests.deploy.conftest import REPO
from tests.polling import wait_until

DEMO = Path(sys.executable).parent / "sluice-demo"


def test_step_profile_scales_with_seconds_and_base_rate() -> None:
    profile = parse("step", 20, 1000)
    assert profile.segments == ((500.0, 6.0), (3000.0, 6.0), (500.0, 8.0))
    assert profile.rate_at(0) == 500 and profile.rate_at(6) == 3000 and profile.rate_at(19.9) == 500
    assert profile.rate_at(20) == 0
    assert profile.records_until(20) == 500 * 6 + 3000 * 6 + 500 * 8
    assert profile.records_until(7) == 3000 + 3000
    assert profile.step_window() == (6.0, 12.0)
    assert parse("constant", 10, 100).step_window() is None
    assert profile.steps() == [(6.0, 500.0, 3000.0), (12.0, 3000.0, 500.0), (20.0, 500.0, 0.0)]
    assert profile.offered_between(5.0, 6.0) == 500 and profile.offered_between(6.5, 7.5) == 3000
    assert profile.offered_between(5.8, 6.8) == pytest.approx(0.2 * 500 + 0.8 * 3000)
    assert profile.offered_between(20.0, 21.0) == 0


def test_explicit_profile_and_errors() -> None:
    assert parse("100@2, 900@1", 99, 1).segments == ((100.0, 2.0), (900.0, 1.0))
    for bad in ("fast", "100@", "-5@3", "100@0", "x@1"):
        with pytest.raises(ProfileError, match="expected one of step, constant, spike, ramp or RATE@SECONDS"):
            parse(bad, 10, 100)


def test_values_are_numbered_and_counted_per_block() -> None:
    import random

    values = make_values(10, 3, random.Random(1))
    assert [v.split()[0] for v in values] == [b"10", b"11", b"12"]
    records = [Record(None, v, "t", 0, i, 0) for i, v in enumerate(values)] + ["plain words here"]
    [(n, words, seqs, bad)] = list(count_partition(records))
    assert n == 4 and seqs == [10, 11, 12] and bad == 1
    assert sum(words.values()) == 3 * 5 + 3 and words["words"] == 1


def _row(
    t: float, proc: int, sched: int, records: int = 100, limit: float | None = 1000.0, offered: float = 0.0
) -> BatchRow:
    return BatchRow(t, int(t * 1000), records, limit, proc, sched, offered=offered)


def test_live_table_shows_the_offered_load_and_marks_each_step() -> None:
    out = io.StringIO()
    table = LiveTable(out, parse("step", 20, 1000).steps())
    for t in (4.8, 5.8, 6.8, 7.8, 12.8, 20.8):
        table.add(_row(t, 900, 0, offered=parse("step", 20, 1000).offered_between(t - 1, t)))
    lines = out.getvalue().splitlines()
    assert lines[0].split() == "t (s) batch records offered rate limit proc ms sched ms top words".split()
    # the batch at 6.8 s covers (5.8, 6.8]: 0.2 s at 500/s and 0.8 s at 3,000/s
    assert [lines[i].split()[3] for i in (1, 4, 5)] == ["500/s", "2,500/s", "3,000/s"]
    steps = [(i, line.strip()) for i, line in enumerate(lines) if "----" in line]
    assert steps == [
        (3, "---- 6.0 s: the offered load steps up, 500/s -> 3,000/s ----"),
        (6, "---- 12.0 s: the offered load steps down, 3,000/s -> 500/s ----"),
        (8, "---- 20.0 s: the offered load ends, 500/s -> 0/s ----"),
    ]


def _step_run(limit_in_step: float, proc_ms: int = 980) -> list[BatchRow]:
    """500/s offered, then a step to 3,000/s from 6 s to 12 s under a rate limit, as a run records."""
    rows = [_row(t, 400, 0, 500, 1800.0, 500.0) for t in (3.8, 4.8, 5.8)]
    rows += [_row(t, proc_ms, 0, round(limit_in_step), limit_in_step, 3000.0) for t in (6.8, 7.8, 8.8, 9.8, 10.8, 11.8)]
    return rows + [_row(12.8, 900, 0, 1000, limit_in_step, 500.0)]


def test_summary_says_what_the_controller_did_and_how_close_to_capacity() -> None:
    c = control(_step_run(1450.0), (6.0, 12.0))
    assert c is not None and (c.offered_before, c.offered_step, c.limit_before) == (500.0, 3000.0, 1800.0)
    assert c.limit_settled == 1450.0 and c.capacity == pytest.approx(1450 / 0.98)
    words = dict(describe_control(c))
    assert words["load step"] == "500/s -> 3,000/s offered at 6.0 s"
    assert words["controller"] == (
        "lowered the rate limit from 1,800/s to 1,450/s: 48% of the offered load; the other 1,550/s waited in Kafka"
    )
    assert words["capacity"] == (
        "the driver's processing time says it could do about 1,480/s; the rate limit settled at 98% of that, "
        "close to it"
    )
    above = dict(describe_control(control(_step_run(3200.0, 500), (6.0, 12.0))))
    assert above["controller"].startswith("raised the rate limit from 1,800/s to 3,200/s: at or above the offered")
    assert above["capacity"].endswith("the rate limit settled at 50% of that, with room to spare")
    under = dict(describe_control(control(_step_run(1450.0, 500), (6.0, 12.0))))
    assert under["capacity"].endswith("settled at 50% of that, below it: the estimator held back more than needed")
    over = dict(describe_control(control(_step_run(1450.0, 2000), (6.0, 12.0))))
    assert over["capacity"].endswith("the rate limit settled at 200% of that, above it, so batches queued")
    text = format_summary(summarize(Series(1000, _step_run(1450.0), step=(6.0, 12.0)), 0, set(), 0, True))
    assert "  controller                     lowered the rate limit from 1,800/s to 1,450/s" in text
    assert "  kept up                        from the first batch of the step on" in text
    assert "batches to steady" not in text
    flat = format_summary(summarize(Series(1000, _step_run(1450.0)), 0, set(), 0, True))
    assert "  load step                      none: the offered load never stepped up" in flat


def test_batches_to_steady_counts_from_the_step_to_lasting_keep_up() -> None:
    rows = [
        _row(1, 500, 0),
        _row(2, 2500, 0),
        _row(3, 1800, 1500),
        _row(4, 1100, 900),
        _row(5, 1000, 200),
        _row(6, 950, 0),
        _row(7, 900, 0),
    ]
    assert batches_to_steady(rows, (2, 8), 1000) == 2  # from the batch at t=4 on it keeps up
    assert batches_to_steady(rows, (2, 4), 1000) is None  # never kept up during the step
    assert batches_to_steady(rows, None, 1000) is None
    # a keep-up run interrupted later does not count
    rows2 = [_row(2, 900, 0), _row(3, 900, 0), _row(4, 900, 0), _row(5, 3000, 2500), _row(6, 900, 0)]
    assert batches_to_steady(rows2, (2, 7), 1000) is None


def test_summary_finds_lost_and_duplicated_records() -> None:
    series = Series(1000, [_row(1, 500, 0, 3), _row(2, 500, 700, 2)])
    ok = summarize(series, 5, {0, 1, 2, 3, 4}, 0, True)
    assert ok.none_lost and ok.peak_scheduling_delay_ms == 700 and "none lost" in format_summary(ok)
    lost = summarize(series, 6, {0, 1, 2, 3, 4}, 0, True)
    assert not lost.none_lost and lost.missing == 1 and "1 lost" in format_summary(lost)
    late = summarize(series, 6, {0, 1, 2, 3, 4}, 0, False)  # not drained: the record is still in Kafka
    assert "1 not processed before the drain timeout" in format_summary(late) and "lost" not in format_summary(late)
    dup = summarize(series, 5, {0, 1, 2, 3}, 1, True)
    assert not dup.none_lost and dup.duplicates == 1


def test_port_in_use_is_named() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(DemoError, match=rf"port {port} \(tracker RPC\) is in use on 127.0.0.1"):
            check_port_free(port, "tracker RPC")


@contextmanager
def _held(port: int) -> Iterator[None]:
    """Hold ``port`` on loopback for the block (another program may already hold it: taken either way)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            pass
        yield


def test_a_taken_default_port_is_replaced_and_named() -> None:
    with _held(TRACKER_PORT), _held(METRICS_PORT + 2):
        ports, notes = Ports.choose(None, None, 2)
    assert ports.tracker != TRACKER_PORT and ports.driver_metrics != METRICS_PORT + 2
    assert f"port {TRACKER_PORT} (tracker RPC) is in use; using {ports.tracker} instead" in notes
    assert f"port {METRICS_PORT + 2} (driver metrics) is in use; using {ports.driver_metrics} instead" in notes
    assert len({ports.tracker, ports.tracker_metrics, ports.driver_metrics, *ports.receiver_metrics}) == 5
    with _held(TRACKER_PORT), pytest.raises(DemoError, match=rf"port {TRACKER_PORT} \(tracker RPC\) is in use"):
        Ports.choose(TRACKER_PORT, 0, 2)  # a port the user chose is not replaced behind their back


def test_make_demo_installs_the_demo_extra_only_and_passes_demo_args() -> None:
    make = shutil.which("make")
    assert make is not None, "make is missing (build-essential)"
    dry = subprocess.run(
        [make, "--no-print-directory", "-n", "-B", "demo", "DEMO_ARGS=--seconds 5 --tracker-port 7200"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installs = re.findall(r"pip install -q -e '(\S+)' ", dry)
    assert installs == [".[demo]"], dry
    assert dry.splitlines()[-1] == ".venv/bin/sluice-demo --seconds 5 --tracker-port 7200"
    test_run = subprocess.run(
        [make, "--no-print-directory", "-n", "-B", "test"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert "pip install -q -e '.[test,demo]' " in test_run


def _demo(args: list[str], env: dict[str, str] | None = None, tmp: Path | None = None) -> subprocess.CompletedProcess:
    assert DEMO.exists(), "sluice-demo is not installed (console script missing: `make install`)"
    return subprocess.run(
        [str(DEMO), *args], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}, cwd=tmp
    )


def test_demo_with_a_port_in_use_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = _demo(["--tracker-port", str(port), "--metrics-port", "0", "--output", str(tmp_path / "o")])
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"sluice-demo: port {port} (tracker RPC) is in use on 127.0.0.1; stop what holds it or choose another "
        "with --tracker-port / --metrics-port"
    ]
    assert not (tmp_path / "o").exists(), "nothing should start when a port is taken"


def test_demo_without_java_says_so_in_one_line(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {"PATH": str(bin_dir), "JAVA_HOME": ""}
    result = _demo(["--output", str(tmp_path / "o")], env=env)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice-demo: Java is missing: PySpark needs Java 17 or newer")


@pytest.mark.slow
def test_demo_with_a_bad_profile_or_estimator_exits_2(tmp_path: Path) -> None:
    result = _demo(["--profile", "wobbly", "--output", str(tmp_path / "o")])
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "profile 'wobbly'" in result.stderr
    result = _demo(["--estimator", "crystal-ball", "--output", str(tmp_path / "o")])
    assert result.returncode == 2 and "estimator 'crystal-ball' is not allowed: expected one of" in result.stderr


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_children_stop_their_whole_process_group(tmp_path: Path) -> None:
    """A child's own children (same group) go too, and a second stop_all signals nobody.

    The child writes the ids of its whole group before it waits, so the test knows exactly which
    processes must go instead of counting whatever it finds under /proc at some moment.
    """

    from sluice.demo.processes import Children

    pids_file, ready = tmp_path / "pids", tmp_path / "ready"
    script = (
        f"sleep 60 & echo $! >> {pids_file}; sleep 60 & echo $! >> {pids_file}; "
        f"echo $$ >> {pids_file}; touch {ready}; wait"
    )
    children = Children(tmp_path / "logs")
    proc = children.start("sleeper", ["sh", "-c", script])
    wait_until(ready.exists, "the child ready", 30, [proc])
    pids = [int(line) for line in pids_file.read_text().split()]
    assert len(pids) == 3 and pids[-1] == proc.pid and all(_alive(p) for p in pids)
    assert {os.getpgid(p) for p in pids} == {proc.pid}  # one group, led by the child
    codes = children.stop_all(timeout=5)
    assert codes == {"sleeper": proc.returncode} and proc.returncode is not None
    wait_until(lambda: not any(_alive(p) for p in pids), "the child's processes gone", 5)
    assert children.stop_all() == {}
