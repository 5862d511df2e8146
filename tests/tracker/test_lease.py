"""The lease through a store outage: bounded requests, quick retries, a lost reply not read as
deposition, and a standby that could not read the store not counting that time against the leader."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from sluice.settings import TrackerSettings
from sluice.tracker.log.lease import (
    LEASE,
    Lease,
    RenewalLate,
    renewal_deadline_s,
    renewal_delay_s,
    request_timeout_s,
)
from sluice.tracker.log.protocol import Deposed, Writer
from sluice.tracker.log.store import DirectoryObjects, open_store
from sluice.tracker.server.service import TrackerService
from sluice.tracker.server.standby import SharedLog


class LostReplies(DirectoryObjects):
    """A store whose next ``lost`` conditional writes land and then time out: a reply lost on the way
    back, which a real store shows only by chance."""

    lost = 0

    def put_if_match(self, key: str, data: bytes, etag: str | None) -> str:
        written = super().put_if_match(key, data, etag)
        if self.lost:
            self.lost -= 1
            raise TimeoutError("read timeout: the write landed, its reply did not")
        return written


class Outage(DirectoryObjects):
    """A store that does not answer reads while ``down`` (the standby's side of an outage)."""

    down = False

    def get(self, key: str, limit: int | None = None) -> tuple[bytes, str] | None:
        if self.down:
            raise ConnectionError("connect timeout")
        return super().get(key, limit)

    def keys(self, prefix: str) -> list[str]:
        if self.down:
            raise ConnectionError("connect timeout")
        return super().keys(prefix)


def test_a_standby_whose_log_read_failed_in_an_outage_gives_the_leader_a_whole_lease_after_it(
    tmp_path: Path,
) -> None:
    store = Outage("file://log", tmp_path)
    Lease(store, Writer("a", "a:7100"), lease_ms=6000).claim()  # a leader that cannot renew meanwhile
    now = [0.0]
    standby = SharedLog(store, TrackerService(), "b:7100", TrackerSettings(lease_ms=6000))
    standby.lease.monotonic = lambda: now[0]
    assert not standby.look().lapsed
    store.down, now[0] = True, 10.0
    with pytest.raises(ConnectionError):  # the log's read fails first: the lease is not even read
        standby.look()
    store.down = False
    assert not standby.look().lapsed  # the timing starts again with the store's first answer
    now[0] = 16.0
    assert standby.look().lapsed


def test_a_renewal_whose_reply_was_lost_is_not_read_as_losing_the_lease(tmp_path: Path) -> None:
    store = LostReplies("file://log", tmp_path)
    lease = Lease(store, Writer("a", "a:7100"), lease_ms=6000)
    lease.claim()
    store.lost = 1
    with pytest.raises(TimeoutError):
        lease.renew()
    lease.renew()  # the lease names this process: its ETag is adopted, not read as another's
    lease.renew()
    got = store.get(LEASE)
    assert got is not None and lease._decode(got).node == "a"


def test_a_lease_another_took_still_deposes(tmp_path: Path) -> None:
    store = DirectoryObjects("file://log", tmp_path)
    a = Lease(store, Writer("a", "a:7100"), lease_ms=6000)
    a.claim()
    Lease(store, Writer("b", "b:7100"), lease_ms=6000).claim()
    with pytest.raises(Deposed) as raised:
        a.renew()
    assert raised.value.leader == "b:7100"


def test_renewals_come_sooner_after_a_failure_and_fit_the_lease_with_a_request_caught_in_an_outage() -> None:
    lease_ms = 6000
    assert renewal_delay_s(lease_ms, failed=False) == 2.0
    # worst case once the store answers again: the request in flight gives up (connect, then read),
    # the pause, one more request: well inside the lease the standby starts timing then
    worst = 2 * request_timeout_s(lease_ms) + renewal_delay_s(lease_ms, failed=True) + request_timeout_s(lease_ms)
    assert worst <= 0.6 * lease_ms / 1000


def test_a_renewal_ends_five_sixths_of_a_lease_after_the_last_good_one_and_begins_no_request_past_it(
    tmp_path: Path,
) -> None:
    lease_ms = 6000
    assert renewal_delay_s(lease_ms, failed=False) + renewal_deadline_s(lease_ms) == 5 * lease_ms / 6000
    ticks = iter(range(100, 200))  # each reading of the clock a second later
    store = LostReplies(f"file://{tmp_path}", tmp_path)
    lease = Lease(store, Writer("a", "a:7100"), lease_ms=lease_ms, monotonic=lambda: float(next(ticks)))
    lease.claim()
    before = store.get(LEASE)
    with pytest.raises(RenewalLate):
        lease.renew(deadline=100)
    assert store.get(LEASE) == before, "a late renewal wrote"
    store.lost = 1  # the write lands, its reply is lost
    with pytest.raises(TimeoutError):
        lease.renew(deadline=1000)
    with pytest.raises(RenewalLate):  # its first request in time, the read after the refused one not
        lease.renew(deadline=next(ticks) + 1.5)
    now = [next(ticks)]
    lease.renew(deadline=now[0] + 10)  # in time: the lease names this process, its ETag adopted


@pytest.mark.timing("tolerates 1.5 s for one bounded attempt of about 0.5 s: another worker busy beside it")
def test_a_lease_request_to_a_store_that_never_answers_gives_up_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A listener that accepts and never replies (a store frozen, or its replies dropped)."""
    silent = socket.create_server(("127.0.0.1", 0))
    silent.listen(16)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = open_store("s3://bucket/log", request_timeout_s(1800))  # 0.3 s a request
    try:
        started = time.monotonic()
        with pytest.raises(Exception, match="(?i)timeout|timed out"):
            store.put_if_match(LEASE, b"x", None)
        assert time.monotonic() - started < 1.5, "more than one bounded attempt"
    finally:
        silent.close()
