"""Receiver registry and rate split, on a manual clock (no sockets, no sleeps)."""

from __future__ import annotations

import pytest

from sluice.block_info import InvalidMessage
from sluice.clock import ManualClock
from sluice.tracker.server.limits import Forbidden
from sluice.tracker.server.registry import ReceiverRegistry


def rates_pushed(pushes: list) -> dict[str, float]:
    return {m["receiver_id"]: m["rate"] for _, m in pushes if m["op"] == "update_rate"}


def test_rate_split_among_one_two_three_receivers_and_after_one_dies() -> None:
    clock = ManualClock(1_000_000)
    reg = ReceiverRegistry(clock=clock, liveness_timeout_ms=10_000)
    assert reg.register(0, "r1", "h1", conn="c1")[0] is None  # no rate published yet
    shares, pushes = reg.publish_rate(0, 900.0)
    assert shares == {"r1": 900.0} and rates_pushed(pushes) == {"r1": 900.0}

    share, pushes = reg.register(0, "r2", "h2", conn="c2")
    assert share == 450.0 and pushes == []  # r2 gets its share in the reply; r1's new share waits for flush
    share, pushes = reg.register(0, "r3", "h3", conn="c3")
    assert share == 300.0 and pushes == []
    assert rates_pushed(reg.flush()) == {"r1": 300.0, "r2": 300.0}  # one push each for both joins
    assert reg.flush() == []
    assert reg.shares(0) == {"r1": 300.0, "r2": 300.0, "r3": 300.0}

    clock.advance(6_000)
    reg.heartbeat("r1", conn="c1")
    reg.heartbeat("r2", conn="c2")
    clock.advance(6_000)  # r3 silent for 12 s > 10 s
    pushes = reg.check_liveness()
    assert rates_pushed(pushes) == {"r1": 450.0, "r2": 450.0}
    assert reg.shares(0) == {"r1": 450.0, "r2": 450.0}
    assert reg.live_counts() == {0: 2} and sorted(reg.receivers) == ["r1", "r2"]  # r3 expired: gone
    assert reg.check_liveness() == []  # dead once

    known, pushes = reg.heartbeat("r3", conn="c3")  # back from a pause: it must register again
    assert not known and pushes == []
    assert reg.register(0, "r3", "h3", conn="c3")[0] == 300.0
    assert rates_pushed(reg.flush()) == {"r1": 300.0, "r2": 300.0}


def test_n_registrations_push_about_n_messages_not_n_squared() -> None:
    """Finding 6: each join changed every other receiver's share and pushed it (N²/2 pushes)."""
    reg = ReceiverRegistry(clock=ManualClock())
    reg.publish_rate(0, 1000.0)
    pushes = []
    for i in range(200):
        pushes += reg.register(0, f"r{i}", "h", conn=f"c{i}")[1]
        if i % 50 == 49:  # the server flushes every 100 ms: a burst spans a few flushes
            pushes += reg.flush()
    assert len(rates_pushed(pushes)) <= 200 and len(pushes) <= 4 * 200  # main pushed 19,900


def test_deregister_and_other_streams() -> None:
    reg = ReceiverRegistry(clock=ManualClock())
    reg.register(0, "a", "h", conn="ca")
    reg.register(0, "b", "h", conn="cb")
    reg.register(1, "c", "h", conn="cc")
    reg.publish_rate(0, 100.0)
    assert reg.shares(1) == {}
    _, pushes = reg.publish_rate(1, 70.0)
    assert rates_pushed(pushes) == {"c": 70.0}
    assert reg.deregister("a", "stopping") == []
    assert rates_pushed(reg.flush()) == {"b": 100.0}
    assert reg.deregister("a") == []
    assert reg.heartbeat("a")[0] is False  # unknown: it should register again


def test_lag_weighted_split_keeps_a_floor_for_caught_up_receivers() -> None:
    reg = ReceiverRegistry(clock=ManualClock(), rate_split="lag")
    reg.register(0, "a", "h", conn="ca")
    reg.register(0, "b", "h", conn="cb")
    reg.publish_rate(0, 1000.0)
    assert reg.shares(0) == {"a": 500.0, "b": 500.0}  # no lag reported yet: equal
    reg.heartbeat("a", lag=300)
    _, pushes = reg.heartbeat("b", lag=0)
    shares = reg.shares(0)
    assert shares["a"] == pytest.approx(50 + 900)
    assert shares["b"] == pytest.approx(50)
    assert sum(shares.values()) == pytest.approx(1000.0)
    assert rates_pushed(pushes) == pytest.approx({"a": 950.0, "b": 50.0})
    _, pushes = reg.heartbeat("a", lag=301)  # a tiny change pushes nothing
    assert pushes == []


def test_reregistration_gets_the_current_share_and_stops_the_old_connection() -> None:
    reg = ReceiverRegistry(clock=ManualClock())
    reg.publish_rate(0, 60.0)
    assert reg.register(0, "a", "h", conn="old")[0] == 60.0
    first = reg.receivers["a"].incarnation
    share, pushes = reg.register(0, "a", "h2", conn="new")
    assert share == 60.0
    assert [(c, m["op"]) for c, m in pushes] == [("old", "stop")]
    assert reg.receivers["a"].incarnation > first  # the registry assigns incarnations, always rising
    assert reg.held("a", "old") is None and reg.held("a", "new") is not None
    with pytest.raises(Forbidden, match="registered to stream 0 under another credential"):
        reg.register(0, "a", "h", conn="thief", principal="token#7")


def test_bad_rates_are_refused() -> None:
    reg = ReceiverRegistry(clock=ManualClock())
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidMessage, match="publish_rate"):
            reg.publish_rate(0, bad)
    assert reg.rates == {}


class Counting(ReceiverRegistry):
    """Counts the receivers each full split visits: the work a registration costs."""

    visited = 0

    def split(self, stream_id: int) -> dict[str, float]:
        self.visited += len(self.streams().get(stream_id, {}))
        return super().split(stream_id)


def test_registering_receivers_costs_work_linear_in_their_number() -> None:
    """Each registration gets its share without a split over the stream's receivers (before: N
    registrations visited N(N+1)/2 receivers, x4 work when N doubles); the pushes of a flush split once."""
    for n in (200, 400):
        reg = Counting(clock=ManualClock())
        reg.publish_rate(0, 1000.0)
        reg.visited = 0
        shares = [reg.register(0, f"r{i}", "h")[0] for i in range(n)]
        assert shares[-1] == pytest.approx(1000.0 / n) and shares[0] == 1000.0
        reg.flush()
        assert reg.visited <= n, f"{n} registrations visited {reg.visited} receivers"
