"""The demo's pure parts: load profiles, the word count's per-block step, the summary arithmetic,
and the one-line failures (missing Java, a port in use, a bad profile) of the real ``sluice-demo``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.demo.app import count_partition
from sluice.demo.load import make_values
from sluice.demo.processes import DemoError, check_port_free
from sluice.demo.profile import ProfileError, parse
from sluice.demo.report import BatchRow, Series, batches_to_steady, format_summary, summarize
from sluice.records import Record

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


def _row(t: float, proc: int, sched: int, records: int = 100) -> BatchRow:
    return BatchRow(t, int(t * 1000), records, 1000.0, proc, sched)


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
    import time

    from sluice.demo.processes import Children

    pids_file, ready = tmp_path / "pids", tmp_path / "ready"
    script = (
        f"sleep 60 & echo $! >> {pids_file}; sleep 60 & echo $! >> {pids_file}; "
        f"echo $$ >> {pids_file}; touch {ready}; wait"
    )
    children = Children(tmp_path / "logs")
    proc = children.start("sleeper", ["sh", "-c", script])
    deadline = time.monotonic() + 30
    while not ready.exists():  # another process: no event crosses the boundary, so poll
        assert proc.poll() is None and time.monotonic() < deadline, "the child never became ready"
        time.sleep(0.02)
    pids = [int(line) for line in pids_file.read_text().split()]
    assert len(pids) == 3 and pids[-1] == proc.pid and all(_alive(p) for p in pids)
    assert {os.getpgid(p) for p in pids} == {proc.pid}  # one group, led by the child
    codes = children.stop_all(timeout=5)
    assert codes == {"sleeper": proc.returncode} and proc.returncode is not None
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [p for p in pids if _alive(p)]
    assert children.stop_all() == {}
