"""A leader and a standby on one log in moto's S3, as real processes: fencing, host loss, a zombie.

Each test checks the invariant that makes failover safe: every block a client was told is durable
is in the log, exactly once, and nothing a deposed leader tried to write after the fence is.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from sluice.embedded import TrackerProcess, start_tracker
from sluice.spark_driver.structured.admission import TrackerRates
from sluice.testing import MotoServer, start_moto
from sluice.testing.stall_proxy import StallProxy
from sluice.tracker.client.sync_client import SyncTrackerClient
from sluice.tracker.client.tracker_client import TrackerClient
from sluice.tracker.log.protocol import decode_object, log_key, log_seqs
from sluice.tracker.log.store import open_store
from tests.polling import eventually
from tests.tracker.conftest import BLOCKS, make_block

pytestmark = pytest.mark.slow


@pytest.fixture
def log_url(s3: MotoServer, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in s3.env.items():  # the test reads the log itself, through the same chain
        monkeypatch.setenv(name, value)
    return f"s3://{s3.bucket()}/tracker"


def tracker(s3: MotoServer, url: str, log: Path, *args: str, block_store: str = BLOCKS) -> TrackerProcess:
    return start_tracker(url, log=log, env=s3.env, args=args, block_store=block_store)


def objects(url: str) -> list[tuple[dict[str, Any], list[str]]]:
    """Each log object's header and the block ids it adds, in order (no snapshot in these runs)."""
    store = open_store(url)
    found = []
    for seq in log_seqs(store):
        got = store.get(log_key(seq))
        assert got is not None
        header, events = decode_object(got[0], log_key(seq))
        found.append((header, [e["block"]["block_id"] for e in events if e.get("type") == "BlockAdded"]))
    assert found and found[0][0]["fence"], "the log starts with a fence (no snapshot expected)"
    return found


def check_log(url: str, acked: list[str], deposed: str | None) -> None:
    """Every acknowledged block is in the log once; the deposed leader wrote nothing after the fence."""
    found = objects(url)
    ids = [b for _, blocks in found for b in blocks]
    assert sorted(ids) == sorted(set(ids)), f"a block is in the log twice: {ids}"
    assert set(acked) <= set(ids), f"acknowledged but not in the log: {set(acked) - set(ids)}"
    if deposed is None:
        return
    fences = [i for i, (h, _) in enumerate(found) if h["fence"] and h["address"] != deposed]
    assert fences, "the new leader fenced the log"
    assert all(h["address"] != deposed for h, _ in found[fences[-1] :]), "the deposed leader wrote past the fence"


async def add(client: TrackerClient, acked: list[str], *ids: str) -> None:
    """Add blocks of receiver r0, each id in its current registration's id space."""
    for short in ids:
        block_id = f"input-0-r0-{client.incarnation('r0')}-{short}"
        result = await client.add_block(make_block(block_id))
        assert result.accepted
        acked.append(block_id)


async def role(address: str) -> str:
    async with TrackerClient(address, "driver", request_timeout=5) as c:
        return str((await c.status())["leadership"]["role"])


def test_a_second_tracker_started_without_standby_on_a_busy_log_follows_it_and_takes_over_later(
    s3: MotoServer, log_url: str, tmp_path: Path
) -> None:
    """One unit file for every tracker: a second one started as the first on a live log becomes its
    standby instead of deposing it (before, both ended without a leader), and leads once it dies."""
    a = tracker(s3, log_url, tmp_path / "a.log")
    acked: list[str] = []
    started: list[TrackerProcess] = []

    async def run() -> None:
        async with TrackerClient(a.address, "receiver", request_timeout=30) as client:
            await client.register_receiver(0, "r0", "h")
            await add(client, acked, "b0", "b1")
            busy = asyncio.create_task(add(client, acked, *(f"c{i}" for i in range(40))))
            loop = asyncio.get_running_loop()
            b = await loop.run_in_executor(None, lambda: tracker(s3, log_url, tmp_path / "b.log"))
            started.append(b)
            await busy  # the log written to while b opened it
            assert await role(b.address) == "standby"
            assert await role(a.address) == "leader" and a.proc.poll() is None
        async with TrackerClient(f"{a.address},{b.address}", "receiver", request_timeout=30) as client:
            await client.register_receiver(0, "r0", "h")
            await add(client, acked, "b2")
            a.stop(signal.SIGKILL)
            await add(client, acked, "b3")  # b took over once a's lease lapsed
            assert client.address == b.address and await role(b.address) == "leader"

    try:
        asyncio.run(run())
    finally:
        a.stop()
        for b in started:
            b.stop()
    assert started and started[0].proc.returncode in (0, None, -15)
    check_log(log_url, acked, a.address)


@pytest.mark.timing("tolerates 10 s for a lease of a few seconds: three busy workers beside it on two cores")
def test_host_loss_the_standby_takes_over_within_ten_seconds(s3: MotoServer, log_url: str, tmp_path: Path) -> None:
    work = tmp_path / "leader-host"
    work.mkdir()
    a = tracker(s3, log_url, work / "tracker.log")
    s = tracker(s3, log_url, tmp_path / "standby.log", "--standby")
    acked: list[str] = []

    async def run() -> float:
        async with TrackerClient(f"{a.address},{s.address}", "receiver", request_timeout=30) as client:
            await client.register_receiver(0, "r0", "h")
            await add(client, acked, *(f"b{i}" for i in range(5)))
            a.stop(signal.SIGKILL)
            killed = time.monotonic()
            for path in work.iterdir():
                path.unlink()
            work.rmdir()  # the leader's host and everything on it are gone
            await add(client, acked, "b5")
            took = time.monotonic() - killed
            await add(client, acked, *(f"b{i}" for i in range(6, 10)))
            assert client.address == s.address
            status = await client.status()
            assert status["leadership"]["role"] == "leader" and status["leadership"]["leader"] == s.address
            return took

    try:
        took = asyncio.run(run())
    finally:
        s.stop()
    assert took < 10, f"the first acknowledgement after the leader died took {took:.1f}s"
    check_log(log_url, acked, a.address)


def test_a_zombie_leader_resumed_after_takeover_acknowledges_nothing_and_exits(
    s3: MotoServer, log_url: str, tmp_path: Path
) -> None:
    a = tracker(s3, log_url, tmp_path / "a.log")
    s = tracker(s3, log_url, tmp_path / "standby.log", "--standby")
    acked: list[str] = []

    async def leads(address: str) -> bool:
        async with TrackerClient(address, "driver", request_timeout=5) as c:
            return (await c.status())["leadership"]["role"] == "leader"

    async def run() -> None:
        async with TrackerClient(f"{a.address},{s.address}", "receiver", request_timeout=30) as client:
            await client.register_receiver(0, "r0", "h")
            await add(client, acked, "b0", "b1")
            a.proc.send_signal(signal.SIGSTOP)
            pending = asyncio.create_task(add(client, acked, "z0"))  # sent to the frozen leader
            deadline = time.monotonic() + 20
            while not await leads(s.address):
                assert time.monotonic() < deadline, "the standby did not take over"
                await asyncio.sleep(0.2)
            a.proc.send_signal(signal.SIGCONT)  # a zombie: it still thinks it leads
            await pending  # acknowledged, by the new leader: a deposed closes the connection, the client moves on
            assert client.address == s.address

    try:
        asyncio.run(run())
        assert a.proc.wait(timeout=15) == 3
    finally:
        a.proc.send_signal(signal.SIGCONT)
        a.stop()
        s.stop()
    check_log(log_url, acked, a.address)


def test_a_store_outage_acknowledges_nothing_until_the_store_answers_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto frozen for 10 s (its port open, nothing answered): the block sent meanwhile waits, no
    standby mistakes the silence for a lapsed lease, and after it everything goes on."""
    moto = start_moto(tmp_path / "moto")
    for name, value in moto.env.items():
        monkeypatch.setenv(name, value)
    url = f"s3://{moto.bucket()}/tracker"
    a = tracker(moto, url, tmp_path / "a.log")
    s = tracker(moto, url, tmp_path / "standby.log", "--standby")
    acked: list[str] = []

    async def run() -> None:
        async with TrackerClient(f"{a.address},{s.address}", "receiver", request_timeout=60) as client:
            await client.register_receiver(0, "r0", "h")
            await add(client, acked, "b0")
            assert moto.proc is not None
            moto.proc.send_signal(signal.SIGSTOP)
            try:
                pending = asyncio.create_task(add(client, acked, "b1"))
                await asyncio.sleep(10)  # the outage itself
                assert not pending.done() and len(acked) == 1, "acknowledged while the log could not be written"
            finally:
                moto.proc.send_signal(signal.SIGCONT)
            await pending
            await add(client, acked, "b2")

    try:
        asyncio.run(run())
        check_log(url, acked, None)
        assert a.proc.poll() is None, "the leader survived the outage"
    finally:
        a.stop()
        s.stop()
        moto.stop()


def test_a_leader_whose_lease_renewal_stalls_past_its_deadline_holds_its_acknowledgements(
    s3: MotoServer, log_url: str, tmp_path: Path
) -> None:
    """The lease's requests hang (S3 slow on that one key) while the log's writes go through: after
    half a lease without a renewal the leader acknowledges nothing, since a standby may have taken
    the lease unheard, and once a renewal gets through it sends what it held."""
    lease_ms = 1800
    proxy = StallProxy(s3.port, r"/_lease ")
    env = {**s3.env, "AWS_ENDPOINT_URL": proxy.endpoint, "SLUICE_TRACKER_LEASE_MS": str(lease_ms)}
    a = start_tracker(log_url, log=tmp_path / "a.log", env=env, block_store=BLOCKS)
    acked: list[str] = []

    async def run() -> None:
        async with TrackerClient(a.address, "receiver", request_timeout=30) as client:
            await client.register_receiver(0, "r0", "h")
            await add(client, acked, "b0")
            proxy.stall()
            await asyncio.sleep(lease_ms / 1000)  # a whole lease unrenewed: a standby could have taken it
            assert proxy.held, "no lease request was stalled"
            pending = asyncio.create_task(add(client, acked, "b1"))
            done, _ = await asyncio.wait([pending], timeout=lease_ms / 1000)
            assert not done, "acknowledged on a lease not renewed for longer than tracker.lease_ms"
            proxy.resume()
            await pending
            await add(client, acked, "b2")

    try:
        asyncio.run(run())
        assert a.proc.poll() is None, "the leader goes on once its lease is renewed"
    finally:
        proxy.close()
        a.stop()
    text = a.log.read_text()
    assert "lease renewal has not succeeded within 0.9s" in text, text[-2000:]
    assert "sending the replies it held" in text
    check_log(log_url, acked, None)


def test_a_client_follows_no_redirect_to_a_tracker_not_on_its_list_and_its_token_never_goes_there(
    s3: MotoServer, log_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The leader's lease names an address the client was not given (here the leader advertises a
    listener that only records who connects; a lease anyone wrote into the log's prefix is the same):
    the listed standby's not_leader is not followed, the client says so once and keeps at its list,
    and its blocks are acknowledged by the listed tracker once that one leads."""
    trap = socket.create_server(("127.0.0.1", 0))
    trap.setblocking(False)
    unlisted = f"127.0.0.1:{trap.getsockname()[1]}"
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    env = {**s3.env, "SLUICE_TRACKER_LEASE_MS": "1500", "SLUICE_TRACKER_AUTH_TOKEN_FILE": str(token)}
    a = start_tracker(
        log_url, log=tmp_path / "a.log", env={**env, "SLUICE_TRACKER_ADVERTISE": unlisted}, block_store=BLOCKS
    )
    s = start_tracker(log_url, log=tmp_path / "s.log", env=env, args=["--standby"], block_store=BLOCKS)
    acked: list[str] = []
    refused = f"names {unlisted} as its leader, which is not on this client's list ({s.address})"

    async def run() -> None:
        async with TrackerClient(s.address, "receiver", auth_token="s3cret-token", request_timeout=30) as client:
            registering = asyncio.create_task(client.register_receiver(0, "r0", "h"))
            await eventually(lambda: refused in caplog.text, 15, message="the refused redirect said")
            a.stop(signal.SIGKILL)  # the listed standby takes the lease over
            await registering
            await add(client, acked, "b0")
            assert client.address == s.address

    try:
        with caplog.at_level(logging.WARNING, logger="sluice.tracker.client.connection"):
            asyncio.run(run())
    finally:
        a.stop()
        s.stop()
    with pytest.raises(BlockingIOError):
        trap.accept()  # nothing ever connected to the unlisted address: no token, no block went there
    trap.close()
    assert caplog.text.count(refused) == 1, caplog.text
    check_log(log_url, acked, unlisted)


def test_while_only_a_standby_answers_a_client_says_so_once_and_once_more_when_a_leader_answers(
    s3: MotoServer, log_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The leader killed: until its lease lapses the standby names it, the client goes back and forth
    a few times a second, and before each round was a line or two (fourteen a second from a receiver)."""
    env = {**s3.env, "SLUICE_TRACKER_LEASE_MS": "2500"}
    a = start_tracker(log_url, log=tmp_path / "a.log", env=env, block_store=BLOCKS)
    s = start_tracker(log_url, log=tmp_path / "s.log", env=env, args=["--standby"], block_store=BLOCKS)
    acked: list[str] = []

    async def run() -> None:
        async with TrackerClient(f"{a.address},{s.address}", "receiver", request_timeout=30) as client:
            await client.register_receiver(0, "r0", "h")
            await add(client, acked, "b0")
            caplog.clear()
            a.stop(signal.SIGKILL)
            await add(client, acked, "b1")  # sent round the list until the standby leads
            assert client.address == s.address

    try:
        with caplog.at_level(logging.INFO, logger="sluice.tracker.client.connection"):
            asyncio.run(run())
    finally:
        a.stop()
        s.stop()
    lines = [r.getMessage() for r in caplog.records]
    recovered = [line for line in lines if line.startswith("reached a leading tracker among")]
    assert len(recovered) == 1, lines
    rounds = int(recovered[0].split(", ")[-1].split()[0])
    assert rounds >= 4, f"only {rounds} not_leader rounds: nothing to rate-limit ({lines})"
    # the loss, the first redirect, the first refused connection, and the two recoveries
    assert len(lines) <= 5, "\n".join(lines)
    check_log(log_url, acked, a.address)


def test_a_driver_that_reaches_a_stale_standby_first_recovers_the_leaders_pending_batch(
    s3: MotoServer, log_url: str, tmp_path: Path
) -> None:
    """A standby answers ``status`` from its copy of the log, which lags (or, while the store is away
    when it starts, is empty).  A driver restarted behind such a standby took its empty list of
    pending batches for the truth: the batch its predecessor had allocated was never run, and its
    records, committed at the source, were lost.  The driver's status asks for the leader's."""
    env = {**s3.env, "SLUICE_TRACKER_STANDBY_POLL_MS": "600000"}  # the standby reads the log once, at start
    a = start_tracker(log_url, log=tmp_path / "a.log", env=env, block_store=BLOCKS)
    s = start_tracker(log_url, log=tmp_path / "s.log", env=env, args=["--standby"], block_store=BLOCKS)

    async def run() -> tuple[dict, dict]:
        async with TrackerClient(a.address, "receiver", request_timeout=30) as client:
            await client.register_receiver(0, "r0", "h")
            await add(client, [], "b0")
        async with TrackerClient(a.address, "driver", request_timeout=30) as driver:
            assert await driver.allocate_blocks(10_000)  # then the driver dies before running it
            await driver.publish_rate(0, 750.0)
        async with TrackerClient(f"{s.address},{a.address}", "driver", request_timeout=30) as restarted:
            copy = await restarted.status()  # whoever answers: the standby, first on the list
            return copy, await restarted.status(leader=True)

    try:
        copy, leaders = asyncio.run(run())
        # the ``sluice`` source resumes its admission from the rate it last published, the leader's
        rates = TrackerRates(SyncTrackerClient(f"{s.address},{a.address}", "driver", request_timeout=30), (0,))
        try:
            rates.client.start()
            resumed = rates.latest()
        finally:
            rates.close()
    finally:
        a.stop()
        s.stop()
    assert copy["leadership"]["role"] == "standby" and copy["pending_batches"] == [], copy
    assert leaders["leadership"]["role"] == "leader" and leaders["pending_batches"] == [10_000], leaders
    assert copy["rates"] == {} and resumed == 750.0, (copy["rates"], resumed)


@pytest.mark.spark
def test_host_loss_mid_stream_two_receivers_and_the_driver_see_every_record_once(
    spark, s3: MotoServer, log_url: str, tmp_path: Path
) -> None:
    """The leader is SIGKILLed and its working directory deleted while two receivers stream into
    S3 blocks and the driver runs batches; the standby takes over, receivers re-send what was not
    acknowledged, and the output holds every record exactly once (20,000 records: 2 x 10,000 at
    2,000/s each, so the failover falls mid-stream and the test stays near a minute)."""
    from sluice.embedded import stop_process, wait_until
    from sluice.spark_driver import StreamingDriver
    from tests.storage.test_s3_end_to_end import Collector, start_receiver

    per_receiver = 10_000
    work = tmp_path / "leader-host"
    work.mkdir()
    store = f"s3://{s3.bucket()}/blocks"
    a = tracker(s3, log_url, work / "tracker.log", "--remember-ms", "5000", block_store=store)
    s = tracker(s3, log_url, tmp_path / "standby.log", "--standby", "--remember-ms", "5000", block_store=store)
    trackers = f"{a.address},{s.address}"
    collector = Collector(2 * per_receiver)
    driver = StreamingDriver(spark, tracker=trackers, batch_interval_ms=1000, initial_rate=40_000)
    driver.foreach_batch(collector).start()
    receivers = [
        start_receiver(
            tmp_path,
            trackers,
            store,
            f"s{i}",
            s3.env,
            "--source",
            "generator",
            "--generator-total",
            str(per_receiver),
            "--max-rate",
            "2000",
        )
        for i in range(2)
    ]
    try:
        wait_until(lambda: len(collector.values) >= 2000, "the first records processed", 90, receivers)
        a.stop(signal.SIGKILL)
        for path in work.iterdir():
            path.unlink()
        work.rmdir()
        wait_until(collector.done.is_set, "every record processed after the failover", 90, receivers)
    finally:
        driver.stop(graceful=False)
        for proc in receivers:
            stop_process(proc)
        a.stop()
        s.stop()
    counts: dict[str, int] = {}
    for value in collector.values:
        counts[value] = counts.get(value, 0) + 1
    assert set(counts) == {f"s{i}-0:{n}" for i in range(2) for n in range(per_receiver)}
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v > 1}
    assert "took over" in s.log.read_text()
