"""The nemesis's schedule, the checker and the bench's arguments, on their own: no cluster runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sluice.errors import InvalidArgument
from sluice.testing.chaos_check import Batch, check, percentile, recoveries, rss_growth
from sluice.testing.chaos_nemesis import KINDS, schedule
from tests.deploy.conftest import REPO


def test_a_seed_gives_one_schedule_within_the_bounds() -> None:
    faults = schedule(3, 1800, max_concurrent=2)
    assert faults == schedule(3, 1800, max_concurrent=2) != schedule(4, 1800, max_concurrent=2)
    assert len(faults) >= 100 and {f.kind for f in faults} == set(KINDS)
    assert all(10 <= f.at and f.until <= 1790 for f in faults)
    for fault in faults:
        active = [f for f in faults if f.at <= fault.at < f.until]
        assert len(active) <= 2
        hosts = [h for f in active for h in f.hosts]
        assert len(hosts) == len(set(hosts)), active
    assert any(b.at < a.until for a, b in zip(faults, faults[1:]))  # faults do overlap


@pytest.mark.parametrize("seed", range(1, 11))
def test_bursts_of_faults_are_apart_by_the_quiet_time_and_last_at_most_the_burst(seed: int) -> None:
    faults = schedule(seed, 1800, standby=True)
    assert len(faults) >= 100  # the campaign's 30 minutes hold at least 100 faults
    began = faults[0].at
    for i, fault in enumerate(faults[1:], 1):
        healed = max(f.until for f in faults[:i])
        if fault.at >= healed:  # none active: a new burst, the quiet time after the last
            assert fault.at - healed >= 30 - 1e-9, (fault, healed)
            began = fault.at
        else:
            assert fault.at - began < 60, (fault, began)
    assert len({f.at for f in faults if f.at >= max((g.until for g in faults if g.at < f.at), default=0)}) >= 20


def test_a_schedule_too_short_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="seconds >= 40"):
        schedule(1, 30)
    with pytest.raises(InvalidArgument, match="quiet >= 0, burst > 0: got 1800, 3.0, 2, 30.0, 0"):
        schedule(1, 1800, burst=0)


def test_the_checker_counts_lost_duplicated_and_out_of_order_records_against_the_end_offsets() -> None:
    ends = {0: 3, 1: 2}  # offsets 0-2 of partition 0 and 0-1 of partition 1 are the topic
    batches = [
        Batch(1, 1.5, ((0, 0, 0, 1000), (1, 0, 1, 1000), (0, 1, 2, 2000))),
        Batch(2, 2.5, ((0, 1, 2, 2000), (1, 1, 3, 2000))),  # (0, 1) again, and (0, 2) never
    ]
    result = check(ends, acked=[0, 1, 2, 3, 4, 9], batches=batches)
    # (0, 2) is missing (id 4's offset), and id 9 was acknowledged but is nowhere: 2 lost, not 3.
    assert result == {
        "records": 5,
        "lost": 2,
        "not_taken": 0,
        "duplicated": 1,
        "order_violations": 1,
        "beyond_end": 0,
        "topic_duplicates": 0,
        "topic_holes": 0,
    }
    exact = [Batch(1, 1.5, ((0, 0, 0, 1000), (1, 0, 1, 1000), (0, 1, 2, 2000))), Batch(2, 3.5, ((1, 1, 3, 2000),))]
    last = Batch(3, 4.5, ((0, 2, 4, 3000),))
    assert check(ends, [0, 1, 2, 3, 4], [*exact, last]) == {
        "records": 5,
        "lost": 0,
        "not_taken": 0,
        "duplicated": 0,
        "order_violations": 0,
        "beyond_end": 0,
        "topic_duplicates": 0,
        "topic_holes": 0,
    }
    # An unacknowledged id is lost only by its offset; a producer retry's second copy is the topic's.
    retried = Batch(3, 4.5, ((0, 2, 3, 3000),))  # id 3 again, at (0, 2)
    assert check(ends, [0, 1, 2], [*exact, retried])["topic_duplicates"] == 1
    assert check({0: 3, 1: 1}, [0, 1, 2, 3, 4], [*exact, last])["beyond_end"] == 1
    # every offset out, but an acknowledged id the topic lacks: lost by the broker, still lost
    assert check(ends, [0, 1, 2, 3, 4, 7], [*exact, last])["lost"] == 1


def test_an_output_that_did_not_drain_counts_what_was_never_taken_from_kafka_apart_from_the_lost() -> None:
    ends = {0: 4, 1: 2}
    out = [Batch(1, 1.5, ((0, 0, 0, 1000), (1, 0, 1, 1000), (0, 1, 2, 2000)))]
    # partition 0: offsets 2 and 3 past the receivers' commit (still in Kafka); partition 1: its
    # offset 1 is below the commit (taken, and not out: lost, or still queued at the tracker)
    got = check(ends, [0, 1, 2, 3, 4, 5], out, taken={0: 2, 1: 2})
    assert (got["lost"], got["not_taken"]) == (1, 2)
    assert (check(ends, [0, 1, 2, 3, 4, 5], out)["lost"], check(ends, [], out)["not_taken"]) == (3, 0)
    # an acknowledged id the topic lacks is still lost, beyond what the backlog can hold
    assert check(ends, [0, 1, 2, 3, 4, 5, 9, 10], out, taken={0: 2, 1: 2})["lost"] == 3


def test_recovery_is_the_first_batch_after_healing_that_holds_a_newer_record() -> None:
    batches = [
        Batch(1, 10.0, ((0, 0, 0, 9_000),)),
        Batch(2, 14.0, ((0, 1, 1, 9_500),)),
        Batch(3, 17.0, ((0, 2, 2, 12_000),)),
    ]
    assert recoveries([11.0, 20.0], batches, until=13.0) == [6.0]  # 20 s heals after the last record
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0 and percentile([1.0, 2.0, 30.0], 0.99) == 30.0
    assert percentile([], 0.5) is None


def test_rss_growth_is_over_the_second_half_of_a_process_that_lived_through_it() -> None:
    samples = [(float(t), "a", 1, 100 if t < 60 else 100 + (t - 50)) for t in range(0, 100)]
    samples += [(float(t), "b", 2 if t < 60 else 3, 100 + t) for t in range(0, 100)]  # restarted in the half
    growth = rss_growth(samples, 0.0, 99.0)
    assert growth["b"] is None and 30 < growth["a"] < 50, growth


def test_rss_growth_of_a_service_restarted_in_the_second_half_is_from_its_warm_up_on() -> None:
    # 1,800 s: the half from 900 s; "c" restarted at 1,000 s and grows for its first 120 s only,
    # "d" restarted at 1,000 s then grows all along, "e" restarted every 200 s from 1,000 s (no
    # process of it lives a third of the half past its warm-up)
    samples = []
    for t in range(0, 1800, 5):
        samples.append((float(t), "c", 1 if t < 1000 else 2, 100 if t < 1000 else 100 + min(t - 1000, 120)))
        samples.append((float(t), "d", 1 if t < 1000 else 2, 100 if t < 1000 else 100 + (t - 1000)))
        samples.append((float(t), "e", 1 if t < 1000 else 1 + (t - 800) // 200, 100 + t))
    growth = rss_growth(samples, 0.0, 1800.0)
    assert growth["c"] == 0.0, growth  # warm-up is not growth
    assert growth["d"] is not None and growth["d"] > 100, growth  # growth after it is
    assert growth["e"] is None, growth


def test_a_signal_during_the_cleanup_an_interrupt_started_is_ignored_until_it_is_done() -> None:
    import os
    import signal

    from sluice.testing.chaos_campaign import _interruptible

    # what the handlers were (SIGINT is ignored in a process a shell without job control started
    # in the background; the campaign installs its own either way)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    cleaned = False
    with pytest.raises(KeyboardInterrupt):
        with _interruptible():
            try:
                os.kill(os.getpid(), signal.SIGINT)  # the first ^C: the campaign stops here ...
                raise AssertionError("the signal did not stop the campaign")
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # ... and a second one, mid-cleanup, is ignored
                cleaned = True
    assert cleaned
    assert {sig: signal.getsignal(sig) for sig in before} == before  # restored after


def test_offsets_the_topic_holds_no_record_at_are_holes_not_losses() -> None:
    ends = {0: 5}
    out = [Batch(1, 1.5, ((0, 0, 0, 1000), (0, 1, 4, 1000), (0, 4, 8, 2000)))]
    # offsets 2 and 3 have no record (a broker restarted mid-write): the ids run on without them
    got = check(ends, [0, 4, 8], out, holes={(0, 2), (0, 3)})
    assert (got["lost"], got["topic_holes"], got["records"]) == (0, 2, 3)
    assert check(ends, [0, 4, 8], out)["lost"] == 2  # the same output, the holes not known
    assert check(ends, [0, 4, 8], out, holes={(0, 2)})["lost"] == 1


class _Drain:
    """The output as a drain sees it, on a manual clock: each pause is 2 s; ``arrive`` maps a time to
    the batch published then; ``topic_holes`` are the offsets a read of the topic finds no record at."""

    def __init__(self, arrive: dict[int, Batch], topic_holes: set[tuple[int, int]]) -> None:
        self.now, self.arrive, self.topic_holes, self.reads = 0.0, arrive, topic_holes, 0

    def output(self) -> list[Batch]:
        return [b for t, b in self.arrive.items() if t <= self.now]

    def holes_in(self, batches: list[Batch]) -> set[tuple[int, int]]:
        self.reads += 1
        seen = {(p, o) for b in batches for p, o, _, _ in b.rows}
        return {(0, o) for o in range(6) if (0, o) not in seen} & self.topic_holes

    def pause(self) -> None:
        self.now += 2


def _drain(world: _Drain, timeout: float = 300) -> tuple[bool, set]:
    from sluice.testing.chaos_campaign import _wait_drained

    wanted = {(0, o) for o in range(6)}
    return _wait_drained(wanted, world.output, world.holes_in, timeout, world.pause, clock=lambda: world.now)


def test_a_drain_lacking_only_holes_ends_once_the_output_stops_changing_not_at_its_deadline() -> None:
    from sluice.testing.chaos_campaign import STALL_S

    world = _Drain(
        {10: Batch(1, 10, ((0, 0, 0, 1), (0, 1, 1, 1))), 40: Batch(2, 40, ((0, 4, 2, 2), (0, 5, 3, 2)))},
        topic_holes={(0, 2), (0, 3)},
    )
    assert _drain(world) == (True, {(0, 2), (0, 3)})
    # the topic was read once, a stall after the last batch arrived, not on every poll before it
    assert world.reads == 1 and 40 + STALL_S <= world.now < 40 + STALL_S + 4


def test_a_drain_lacking_records_the_topic_holds_waits_for_them_and_then_ends_without_holes() -> None:
    world = _Drain(
        {10: Batch(1, 10, ((0, 0, 0, 1), (0, 1, 1, 1))), 100: Batch(2, 100, ((0, 2, 2, 2), (0, 3, 3, 2)))}
        | {110: Batch(3, 110, ((0, 4, 4, 3), (0, 5, 5, 3)))},
        topic_holes=set(),
    )
    assert _drain(world) == (True, set())
    assert 110 <= world.now < 112 and world.reads == 1  # asked at the stall, found records there, waited on


def test_a_drain_that_never_gets_a_record_the_topic_holds_times_out() -> None:
    world = _Drain({10: Batch(1, 10, ((0, 0, 0, 1),))}, topic_holes={(0, 5)})
    drained, holes = _drain(world, timeout=200)
    assert not drained and holes == {(0, 5)} and 200 <= world.now < 204 and world.reads == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--minutes", "0.5"], "--minutes must be at least 0.67 (40 s), got 0.5"),
        # with --minutes too short as well, a bench without the directory check stops on the minutes
        # and starts no campaign
        (
            ["--keep", "{held}", "--minutes", "0.5"],
            "--keep must name a new or empty directory, got {held}, which holds files",
        ),
    ],
)
@pytest.mark.slow
def test_the_bench_refuses_a_campaign_too_short_or_a_directory_a_run_already_used(
    tmp_path: Path, args: list[str], message: str
) -> None:
    held = tmp_path / "held"
    held.mkdir()
    (held / "output.jsonl").write_text("{}\n")  # a previous run's output would count again
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "chaos.py"), *[a.format(held=held) for a in args]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and message.format(held=held) in run.stderr, run.stderr
    assert run.stdout == "" and (held / "output.jsonl").read_text() == "{}\n"
