"""Whole operations over RPC against an in-process server: rates pushed, cleanup, rolling, TLS."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from sluice.clock import ManualClock
from sluice.embedded.certs import self_signed
from sluice.tracker.client.sync_client import SyncTrackerClient
from sluice.tracker.client.tracker_client import Cleanup, TrackerClient, TrackerUnavailable
from tests.tracker.conftest import ThreadServer, make_block


def test_rates_are_pushed_to_live_receivers_and_resplit_when_one_dies(tmp_path: Path) -> None:
    clock = ManualClock(5_000_000)
    srv = ThreadServer(
        tmp_path / "wal", open_kwargs={"clock": clock, "liveness_timeout_ms": 10_000}, liveness_interval_s=3600
    )  # liveness is checked by hand below

    async def run() -> None:
        pushed: asyncio.Queue = asyncio.Queue()
        receivers = [
            TrackerClient(srv.address, "receiver", on_update_rate=lambda s, r, x: pushed.put_nowait((r, round(x, 6))))
            for _ in range(3)
        ]
        driver = TrackerClient(srv.address, "driver")
        await asyncio.gather(*(c.start() for c in [*receivers, driver]))

        async def drain(n: int) -> dict[str, float]:
            got = {}
            for _ in range(n):
                r, x = await asyncio.wait_for(pushed.get(), 10)
                got[r] = x
            return got

        assert await receivers[0].register_receiver(0, "r0", "h") is None
        await driver.publish_rate(0, 600.0)
        assert await drain(1) == {"r0": 600.0}
        assert await receivers[1].register_receiver(0, "r1", "h") == 300.0
        assert await drain(1) == {"r0": 300.0}
        assert await receivers[2].register_receiver(0, "r2", "h") == 200.0
        assert await drain(2) == {"r0": 200.0, "r1": 200.0}

        clock.advance(6_000)
        await receivers[0].heartbeat("r0", lag=5)
        await receivers[1].heartbeat("r1")
        clock.advance(6_000)  # r2 silent for 12 s
        srv.loop.call_soon_threadsafe(srv.server.check_liveness)
        assert await drain(2) == {"r0": 300.0, "r1": 300.0}
        status = await driver.status()
        assert "r2" not in status["receivers"] and status["receivers"]["r0"]["lag"] == 5  # expired: gone
        assert status["streams"][0]["rate"] == 600.0 and status["rates"] == {0: 600.0}
        for c in [*receivers, driver]:
            await c.close()

    try:
        asyncio.run(run())
    finally:
        srv.stop()


def test_batch_completed_returns_blocks_of_completed_batches_past_remember(tmp_path: Path) -> None:
    srv = ThreadServer(tmp_path / "wal", open_kwargs={"remember_ms": 2000})
    try:
        with SyncTrackerClient(srv.address, "admin") as driver:
            driver.register_receiver(0, "r0", "h")
            for t in (1000, 2000, 3000, 4000, 5000, 6000):
                driver.add_block(make_block(f"b{t}"))
                assert [b.block_id for b in driver.allocate_blocks(t)[0]] == [f"b{t}"]
            assert driver.batch_completed({"batch_time_ms": 1000, "num_records": 10}) == Cleanup([], None)
            assert driver.status()["pending_batches"] == [2000, 3000, 4000, 5000, 6000]
            assert driver.batch_completed({"batch_time_ms": 3000}) == Cleanup([], None)
            # 4000 - remember 2000 = 2000: batches strictly older and completed go (1000, not 3000).
            cleanup = driver.batch_completed({"batch_time_ms": 4000})
            assert [b.block_id for b in cleanup.deletable] == ["b1000"] and cleanup.through_ms == 1000
            # Not confirmed (a driver killed before it deleted them): named again, still remembered.
            assert [b.block_id for b in driver.batch_completed({"batch_time_ms": 5000}).deletable] == ["b1000"]
            assert driver.get_blocks_of_batch(1000) != {}
            # Confirmed: forgotten, and the next cleanable batch comes instead.
            cleanup = driver.batch_completed({"batch_time_ms": 6000}, deleted_through_ms=1000)
            assert [b.block_id for b in cleanup.deletable] == ["b3000"] and cleanup.through_ms == 3000
            assert driver.get_blocks_of_batch(1000) == {}
            assert [b.location for b in driver.get_blocks_of_batch(2000)[0]] == ["file:///blocks/stream-0/b2000.blk"]
            assert driver.allocate_blocks(3000) is None
            with pytest.raises(Exception, match="batch_time_ms"):
                driver.batch_completed({"num_records": 3})
    finally:
        srv.stop()


def test_a_confirmation_never_forgets_a_batch_that_is_not_completed_or_still_remembered(tmp_path: Path) -> None:
    """deleted_through_ms past what the tracker named (a confused or hostile driver) forgets only
    completed batches already out of the remember window."""
    srv = ThreadServer(tmp_path / "wal", open_kwargs={"remember_ms": 2000})
    try:
        with SyncTrackerClient(srv.address, "admin") as driver:
            driver.register_receiver(0, "r0", "h")
            for t in (1000, 2000, 3000):
                driver.add_block(make_block(f"b{t}"))
                driver.allocate_blocks(t)
            driver.batch_completed({"batch_time_ms": 2000})
            driver.batch_completed({"batch_time_ms": 3000}, deleted_through_ms=10**12)
            assert driver.get_blocks_of_batch(1000) != {}  # not completed
            assert driver.get_blocks_of_batch(2000) != {} and driver.get_blocks_of_batch(3000) != {}  # remembered
    finally:
        srv.stop()


def test_running_server_rolls_segments_and_recovers_from_the_snapshot(tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    srv = ThreadServer(wal, open_kwargs={"wal_segment_bytes": 4096})
    try:
        with SyncTrackerClient(srv.address, "admin") as client:
            client.register_receiver(0, "r0", "h")
            for t in range(1, 41):
                client.add_block(make_block(f"b{t}", ranges=(("t", 0, t * 10, t * 10 + 10),)))
                if t % 5 == 0:
                    client.allocate_blocks(t * 100)
                    client.batch_completed({"batch_time_ms": t * 100})
            client.publish_rate(0, 42.0)
            before = client.status()
            batches = {t: client.get_blocks_of_batch(t) for t in range(500, 4001, 500)}
    finally:
        srv.stop()
    names = sorted(p.name for p in wal.iterdir())
    assert [n for n in names if n.startswith("snapshot-")], names
    assert "log-0000000000" not in names  # wholly older segments were deleted
    srv = ThreadServer(wal)
    try:
        with SyncTrackerClient(srv.address, "admin") as client:
            client.register_receiver(0, "r0", "h")
            after = client.status()
            assert after["streams"] == before["streams"] and after["rates"] == {0: 42.0}
            assert after["last_allocated_batch_ms"] == before["last_allocated_batch_ms"]
            assert {t: client.get_blocks_of_batch(t) for t in range(500, 4001, 500)} == batches
            assert client.add_block(make_block("dup", ranges=(("t", 0, 10, 20),))).accepted is False
    finally:
        srv.stop()


@pytest.mark.slow
def test_tls_listener(tmp_path: Path) -> None:
    pair = self_signed(tmp_path, common_name="localhost", hosts=("127.0.0.1",))
    cert, key = pair.cert, pair.key
    from sluice.tracker.server.recovery import open_service
    from sluice.tracker.server.server import TrackerServer
    from sluice.tracker.wire.tls import server_context

    srv = ThreadServer(None)

    async def restart_with_tls() -> int:
        await srv.server.stop()
        service, commit = open_service(None)
        srv.server = TrackerServer(service, commit)
        await srv.server.start("127.0.0.1", 0, ssl=server_context(str(cert), str(key)))
        return srv.server.port

    port = srv.call(restart_with_tls())
    client_ctx = ssl.create_default_context(cafile=str(cert))
    try:
        with SyncTrackerClient(f"127.0.0.1:{port}", "admin", ssl=client_ctx) as client:
            client.register_receiver(0, "r0", "h")
            assert client.add_block(make_block("over-tls")).accepted
        plain = SyncTrackerClient(f"127.0.0.1:{port}", "admin", connect_timeout=2, request_timeout=1)
        with pytest.raises((TrackerUnavailable, ConnectionError, OSError)):  # a plain hello to a TLS port
            plain.start()
        plain.close()
    finally:
        srv.stop()


def test_allocate_blocks_bounded_per_stream_over_rpc(tmp_path: Path) -> None:
    srv = ThreadServer(tmp_path / "wal")
    try:
        with SyncTrackerClient(srv.address, "admin") as client:
            client.register_receiver(0, "r0", "h")
            client.register_receiver(1, "r1", "h")
            for i in range(4):
                client.add_block(make_block(f"s0-{i}", stream=0, records=100))
                client.add_block(make_block(f"s1-{i}", stream=1, records=100))
            first = client.allocate_blocks(1000, {0: 250, 1: 100})
            assert [b.block_id for b in first[0]] == ["s0-0", "s0-1"]
            assert [b.block_id for b in first[1]] == ["s1-0"]
            rest = client.allocate_blocks(2000)  # no bound: everything left (what an older driver gets)
            assert [b.block_id for b in rest[0]] == ["s0-2", "s0-3"] and len(rest[1]) == 3
    finally:
        srv.stop()


@pytest.mark.parametrize("bad", [[[0, 0]], [[-1, 5]], [[0]], [["0", 5]], [[0, 1.5]], [7]])
def test_allocate_blocks_refuses_a_bad_bound_naming_it(bad: list) -> None:
    from sluice.block_info import InvalidMessage
    from sluice.tracker.server.service import TrackerService
    from sluice.tracker.wire.protocol import check_request

    service = TrackerService()
    with pytest.raises(InvalidMessage, match=r"allocate_blocks.max_records( entry .*)? is not allowed: expected "):
        msg = {"op": "allocate_blocks", "id": 1, "batch_time_ms": 1000, "max_records": bad}
        _, _, request = check_request(msg)
        service.handle("allocate_blocks", request)
    assert service.tracker.last_allocated_ms is None


def test_a_blocks_stamps_come_back_with_the_trackers_own_and_survive_a_restart(tmp_path: Path) -> None:
    """The tracker adds when it took the block to the stamps a receiver sent (sluice.stages) and
    logs them with it; a block without stamps (an older receiver's) gets none."""
    from dataclasses import replace

    from sluice.stages import STAMPS, TRACKED, now_ms

    sent = replace(make_block("stamped"), metadata={STAMPS: {"cut": 1, "stored": 2}})
    srv = ThreadServer(tmp_path / "wal")
    try:
        with SyncTrackerClient(srv.address, "admin") as client:
            client.register_receiver(0, "r0", "h")
            before = now_ms()
            assert client.add_block(sent).info is sent  # the reply names no block: the ack stays a few bytes
            after = now_ms()
            client.add_block(make_block("plain"))
    finally:
        srv.stop()
    srv = ThreadServer(tmp_path / "wal")  # recovered from the log
    try:
        with SyncTrackerClient(srv.address, "admin") as client:
            stamped, plain = client.allocate_blocks(1000)[0]
    finally:
        srv.stop()
    stamps = stamped.metadata[STAMPS]
    assert stamps["cut"] == 1 and stamps["stored"] == 2 and before <= stamps[TRACKED] <= after
    assert STAMPS not in plain.metadata
