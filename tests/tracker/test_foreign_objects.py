"""Objects no tracker of the log wrote, in a shared directory under a leader and a standby (real
processes): the standby says so once per object, shows them in status, and either follows on or
stops; it never stays a standby that has silently stopped following."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NamedTuple

import pytest

from sluice.embedded import TrackerProcess, start_tracker
from sluice.tracker.client.tracker_client import TrackerClient
from sluice.tracker.log.lease import LEASE
from sluice.tracker.log.protocol import Writer, encode_object, log_key
from sluice.tracker.log.store import DirectoryObjects
from tests.tracker.conftest import BLOCKS, make_block

pytestmark = pytest.mark.slow

FAST = ("--lease-ms", "1500", "--standby-poll-ms", "100")


class Pair(NamedTuple):
    """A leader, its standby, and the directory their log is in."""

    leader: TrackerProcess
    standby: TrackerProcess
    store: DirectoryObjects

    @property
    def both(self) -> str:
        """The client's address list: the leader first, then the standby."""
        return f"{self.leader.address},{self.standby.address}"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    url = f"file://{tmp_path / 'log'}"
    a = start_tracker(url, log=tmp_path / "a.log", args=FAST, block_store=BLOCKS)
    s = start_tracker(url, log=tmp_path / "standby.log", args=(*FAST, "--standby"), block_store=BLOCKS)
    try:
        yield Pair(a, s, DirectoryObjects(url, tmp_path / "log"))
    finally:
        a.stop()
        s.stop()


async def leadership(address: str) -> dict:
    async with TrackerClient(address, "driver", request_timeout=5) as c:
        return dict((await c.status())["leadership"])


async def until(address: str, check: str, ok: object, timeout: float = 15) -> dict:
    """The standby's leadership status once ``ok(status)`` holds (polled: it changes on the store's time)."""
    deadline = time.monotonic() + timeout
    async with TrackerClient(address, "driver", request_timeout=5) as c:  # one connection for every poll
        while True:
            got = dict((await c.status())["leadership"])
            if ok(got):  # type: ignore[operator]
                return got
            assert time.monotonic() < deadline, f"{address}: never {check}: {got}"
            await asyncio.sleep(0.1)


async def add(client: TrackerClient, short: str) -> None:
    result = await client.add_block(make_block(f"input-0-r0-{client.incarnation('r0')}-{short}"))
    assert result.accepted


@asynccontextmanager
async def receiving(address: str) -> AsyncIterator[TrackerClient]:
    """A receiver's client of ``address`` (one tracker or several), ``r0`` registered on stream 0
    and its first block ``b0`` added."""
    async with TrackerClient(address, "receiver", request_timeout=30) as client:
        await client.register_receiver(0, "r0", "h")
        await add(client, "b0")
        yield client


def test_an_object_past_the_end_is_said_once_and_the_standby_still_takes_over(pair: Pair) -> None:
    a, s, store = pair

    async def run() -> None:
        async with receiving(pair.both) as client:
            position = (await leadership(a.address))["log_position"]
            await until(s.address, "caught up", lambda st: st["log_position"] == position)
            far = log_key(position + 50)
            store.put_if_absent(far, encode_object(Writer("intruder", "127.0.0.9:1"), b""))
            got = await until(s.address, "said so", lambda st: st["unreadable"])
            assert far in got["unreadable"][0] and got["role"] == "standby"
            await asyncio.sleep(1.0)  # ten polls more inside the gap
            assert s.log.read_text().count(far) == 1, "one line per object, not one per poll"
            a.stop(signal.SIGKILL)
            await add(client, "b1")  # the standby followed on, saw the lease lapse and leads
            assert client.address == s.address
            assert (await leadership(s.address))["role"] == "leader"

    asyncio.run(run())


def test_a_lease_that_is_no_lease_record_lapses_and_the_standby_takes_over(pair: Pair) -> None:
    a, s, store = pair

    async def run() -> None:
        async with receiving(pair.both) as client:
            store.put(LEASE, b"written by something else")
            await add(client, "b1")
            got = await until(s.address, "leading", lambda st: st["role"] == "leader")
            assert any(name.startswith(f"{LEASE}@") for name in got["unreadable"])
            code = await asyncio.to_thread(a.proc.wait, 10)
            assert code == 3, "the leader whose lease was overwritten stepped down"
            await add(client, "b2")  # b1 may have reached the old leader before it stepped down
            assert client.address == s.address

    asyncio.run(run())
    assert s.log.read_text().count("cannot be applied") == 1, "one line for the one foreign lease"


def test_an_object_at_the_next_number_that_does_not_decode_stops_the_standby(pair: Pair) -> None:
    a, s, store = pair

    async def run() -> int:
        async with receiving(a.address):
            return int((await leadership(a.address))["log_position"])

    position = asyncio.run(run())
    store.put_if_absent(log_key(position + 1), b"\x00" * 64)
    assert s.proc.wait(timeout=15) == 1, "a standby that cannot follow exits for its supervisor"
    text = s.log.read_text()
    assert log_key(position + 1) in text and "cannot be applied" in text
