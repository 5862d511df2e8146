"""``RetryLog`` on a manual clock: the first failure is said at once, repeats at a bounded rate
with the count since, recovery in one line."""

from __future__ import annotations

import errno

from sluice.retry_log import RetryLog, reason


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_first_failure_names_the_peer_the_reason_and_the_interval() -> None:
    lines = RetryLog("the tracker at 127.0.0.1:1", 1.0, clock=Clock())
    assert lines.failed("connection refused") == (
        "cannot reach the tracker at 127.0.0.1:1 (connection refused); retrying every 1.0 s at most"
    )
    assert lines.failing


def test_repeats_at_most_once_per_period_with_the_failures_since() -> None:
    clock = Clock()
    lines = RetryLog("the tracker at h:1", 0.5, every_s=30.0, clock=clock)
    said = [lines.failed("connection refused")]
    for _ in range(59):  # 29.5 s of failures every 0.5 s: nothing more is said
        clock.now += 0.5
        said.append(lines.failed("connection refused"))
    assert [s for s in said if s is not None] == [said[0]]
    clock.now += 0.5  # 30 s after the first line
    assert lines.failed("timed out") == (
        "still cannot reach the tracker at h:1 (timed out) after 30 s: 60 failed attempt(s) in the last 30 s, "
        "61 in all; retrying"
    )
    clock.now += 29.0
    assert lines.failed("timed out") is None
    clock.now += 1.0
    assert "2 failed attempt(s) in the last 30 s, 63 in all" in (lines.failed("timed out") or "")


def test_recovery_is_one_line_then_a_new_outage_starts_over() -> None:
    clock = Clock()
    lines = RetryLog("the tracker at h:1", 2.0, clock=clock)
    assert lines.reached() is None  # nothing failed: nothing to say
    for _ in range(8):
        lines.failed("connection refused")
        clock.now += 1.5
    assert lines.reached() == "reached the tracker at h:1 after 12.0 s, 9 attempts"
    assert not lines.failing and lines.reached() is None
    assert (lines.failed("connection refused") or "").startswith("cannot reach the tracker at h:1")


def test_reason_is_short() -> None:
    assert reason(ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 1)")) == (
        "connection refused"
    )
    assert reason(TimeoutError()) == "timed out"
    assert reason(OSError("Multiple exceptions: [Errno 111] a, [Errno 99] b")) == (
        "OSError: Multiple exceptions: [Errno 111] a, [Errno 99] b"
    )
