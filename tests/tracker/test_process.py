"""The real ``sluice-tracker`` process: crash under load, SIGTERM, a damaged log, reconnects."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.block_info import block_id_prefix
from sluice.config import MAX_TOKEN
from sluice.embedded import free_port, stop_process, tracker_argv
from sluice.tracker.client.tracker_client import TrackerAuthError, TrackerClient, TrackerUnavailable
from tests.tracker.conftest import make_block, start_tracker

pytestmark = pytest.mark.slow


async def load_until_killed(address: str, proc: subprocess.Popen, clients: int, kill_after: int) -> set[str]:
    """Concurrent add_block from ``clients`` connections; SIGKILL the tracker mid-load.

    Returns the ids whose add_block was acknowledged (before or after the kill signal: an ack that
    arrives at all was sent after its fsync).
    """
    acked: set[str] = set()
    killed = asyncio.Event()
    conns = [TrackerClient(address, "admin", request_timeout=5) for _ in range(clients)]  # any block id
    await asyncio.gather(*(c.start() for c in conns))
    await asyncio.gather(*(c.register_receiver(0, f"r{ci}", "h") for ci, c in enumerate(conns)))

    async def lane(ci: int, lane_no: int, c: TrackerClient) -> None:
        i = 0
        while not killed.is_set():
            block_id = f"c{ci}-l{lane_no}-{i}"
            partition = ci * 8 + lane_no  # one partition per lane: its offsets only grow
            ranges = (("t", partition, i * 10, i * 10 + 10),)
            result = await c.add_block(make_block(block_id, records=10, ranges=ranges))
            assert result.accepted
            acked.add(block_id)
            i += 1
            if len(acked) >= kill_after and not killed.is_set():
                os.kill(proc.pid, signal.SIGKILL)
                killed.set()

    tasks = [asyncio.ensure_future(lane(ci, k, c)) for ci, c in enumerate(conns) for k in range(8)]
    await killed.wait()
    proc.wait(10)
    for c in conns:  # requests cut off by the kill were not acknowledged; stop retrying them
        await c.close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(r is None or isinstance(r, TrackerUnavailable) for r in results), results
    return acked


def test_sigkill_under_load_loses_no_acknowledged_block_and_duplicates_none(tmp_path: Path) -> None:
    port = free_port()
    wal = tmp_path / "wal"
    proc = start_tracker(wal, port, tmp_path / "tracker.log")
    address = f"127.0.0.1:{port}"
    acked = asyncio.run(load_until_killed(address, proc, clients=4, kill_after=3000))
    assert proc.returncode == -signal.SIGKILL

    proc = start_tracker(wal, port, tmp_path / "tracker2.log")
    try:

        async def check() -> None:
            async with TrackerClient(address, "admin") as driver:
                await driver.register_receiver(0, "r-check", "h")
                allocation = await driver.allocate_blocks(1000)
                got = [b.block_id for b in allocation[0]]
                assert len(got) == len(set(got)), "a block is in the batch twice"
                missing = acked - set(got)
                assert not missing, f"{len(missing)} acknowledged blocks lost, e.g. {sorted(missing)[:5]}"
                # Blocks written but not acknowledged may be there too; never more than were sent.
                assert len(got) >= len(acked)
                # A receiver re-reading acknowledged offsets after the crash is dropped, not doubled.
                some = sorted(acked)[0]
                ci, lane_no, i = (int(x.lstrip("cl")) for x in some.split("-"))
                ranges = (("t", ci * 8 + lane_no, i * 10, i * 10 + 10),)
                again = await driver.add_block(make_block("re-read", ranges=ranges))
                assert again.accepted is False
                status = await driver.status()
                assert status["pending_batches"] == [1000]

        asyncio.run(check())
    finally:
        assert stop_process(proc) == 0


def test_sigterm_answers_in_flight_requests_flushes_and_exits_0(tmp_path: Path) -> None:
    port = free_port()
    wal = tmp_path / "wal"
    proc = start_tracker(wal, port, tmp_path / "tracker.log")
    address = f"127.0.0.1:{port}"

    async def run() -> tuple[set[str], int]:
        client = TrackerClient(address, "admin", request_timeout=20)  # an admin adds blocks of any id
        await client.start()
        await client.register_receiver(0, "r0", "h")
        adds = {f"b{i}": asyncio.ensure_future(client.add_block(make_block(f"b{i}"))) for i in range(2000)}
        await asyncio.sleep(0)  # the frames leave on the next loop iteration
        await asyncio.sleep(0)
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 20)
        await client.close()  # requests the tracker never read are retried forever: stop them
        await asyncio.gather(*adds.values(), return_exceptions=True)
        return {b for b, f in adds.items() if f.exception() is None}, code

    answered, code = asyncio.run(run())
    assert code == 0
    assert answered, "the tracker answered nothing it had received before SIGTERM"
    assert "tracker stopped" in (tmp_path / "tracker.log").read_text()

    proc = start_tracker(wal, port, tmp_path / "tracker2.log")
    try:

        async def check() -> set[str]:
            async with TrackerClient(address, "driver") as driver:
                return {b.block_id for b in (await driver.allocate_blocks(1))[0]}

        assert answered <= asyncio.run(check())
    finally:
        stop_process(proc)


def test_damaged_log_stops_the_tracker_naming_file_and_offset(tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    port = free_port()
    proc = start_tracker(wal, port, tmp_path / "tracker.log")

    async def add() -> None:
        async with TrackerClient(f"127.0.0.1:{port}", "admin") as client:  # any block id
            await client.register_receiver(0, "r0", "h")
            for i in range(5):
                await client.add_block(make_block(f"b{i}"))

    asyncio.run(add())
    assert stop_process(proc) == 0
    segment = sorted(wal.glob("log-*"))[0]
    data = bytearray(segment.read_bytes())
    data[20] ^= 0xFF  # inside the first record
    segment.write_bytes(bytes(data))
    result = subprocess.run(
        [sys.executable, *tracker_argv(f"127.0.0.1:{free_port()}", wal)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"{segment} at offset 0" in result.stderr


def test_torn_tail_is_cut_with_a_warning_and_the_tracker_starts(tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    port = free_port()
    address = f"127.0.0.1:{port}"
    proc = start_tracker(wal, port, tmp_path / "tracker.log")

    async def add() -> None:
        async with TrackerClient(address, "admin") as client:  # any block id
            await client.register_receiver(0, "r0", "h")
            for i in range(3):
                await client.add_block(make_block(f"b{i}"))

    asyncio.run(add())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    segment = sorted(wal.glob("log-*"))[-1]
    size = segment.stat().st_size
    with open(segment, "ab") as fh:  # half a record: what a crash mid-write leaves
        fh.write(b"\x00\x00\x01\x00\xde\xad")
    proc = start_tracker(wal, port, tmp_path / "tracker2.log")
    try:

        async def check() -> list[str]:
            async with TrackerClient(address, "driver") as driver:
                return [b.block_id for b in (await driver.allocate_blocks(1))[0]]

        assert asyncio.run(check()) == ["b0", "b1", "b2"]
        assert segment.stat().st_size == size
        log = (tmp_path / "tracker2.log").read_text()
        assert "torn tail" in log and str(segment) in log
    finally:
        assert stop_process(proc) == 0


def test_client_reconnects_and_reregisters_after_a_tracker_restart(tmp_path: Path) -> None:
    port = free_port()
    wal = tmp_path / "wal"
    address = f"127.0.0.1:{port}"
    proc = start_tracker(wal, port, tmp_path / "tracker.log")

    async def run() -> None:
        nonlocal proc
        rates: asyncio.Queue = asyncio.Queue()
        receiver = TrackerClient(address, "receiver", on_update_rate=lambda s, r, x: rates.put_nowait((r, x)))
        driver = TrackerClient(address, "driver")
        await receiver.start()
        await driver.start()
        assert await receiver.register_receiver(0, "r0", "host") is None
        await driver.publish_rate(0, 500.0)
        assert await asyncio.wait_for(rates.get(), 10) == ("r0", 500.0)
        before = block_id_prefix(0, "r0", receiver.incarnation("r0")) + "before"
        await receiver.add_block(make_block(before))

        assert stop_process(proc) == 0
        proc = start_tracker(wal, port, tmp_path / "tracker2.log")
        # Re-registration on reconnect hands back the recovered rate.
        assert await asyncio.wait_for(rates.get(), 20) == ("r0", 500.0)
        after = block_id_prefix(0, "r0", receiver.incarnation("r0")) + "after"  # the new registration's incarnation
        assert after.rpartition("-")[0] != before.rpartition("-")[0]
        await receiver.add_block(make_block(after))
        allocation = await driver.allocate_blocks(1000)
        assert [b.block_id for b in allocation[0]] == [before, after]
        status = await driver.status()
        assert status["receivers"]["r0"]["live"] and status["rates"] == {0: 500.0}
        await receiver.close()
        await driver.close()

    try:
        asyncio.run(run())
    finally:
        stop_process(proc)


def test_auth_token_file_of_the_real_process(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-123\n")
    port = free_port()
    proc = start_tracker(tmp_path / "wal", port, tmp_path / "tracker.log", "--auth-token-file", str(token_file))
    address = f"127.0.0.1:{port}"

    async def run() -> None:
        with pytest.raises(TrackerAuthError):
            await TrackerClient(address, "admin", connect_timeout=10).start()
        async with TrackerClient(address, "admin", auth_token="tok-123") as client:
            assert (await client.status())["streams"] == {}

    try:
        asyncio.run(run())
        assert "hello refused: role admin needs its credential" in (tmp_path / "tracker.log").read_text()
    finally:
        assert stop_process(proc) == 0


@pytest.mark.slow
def test_the_longest_token_a_file_may_hold_gets_through_hello_and_a_longer_one_stops_the_start(
    tmp_path: Path,
) -> None:
    """A token file is held to what a hello carries (MAX_TOKEN bytes, the pre-hello frame less the
    hello's other fields): one byte more is refused at start, not at every connection."""
    token_file = tmp_path / "token"
    token_file.write_text("t" * (MAX_TOKEN + 1) + "\n")
    refused = subprocess.run(
        [sys.executable, *tracker_argv(None, tmp_path / "wal", extra=["--auth-token-file", str(token_file)])],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        f"sluice-tracker: auth token file {token_file} holds a token of {MAX_TOKEN + 1:,} bytes; "
        f"allowed: at most {MAX_TOKEN:,}"
    ]
    longest = "t" * MAX_TOKEN
    token_file.write_text(longest + "\n")
    port = free_port()
    proc = start_tracker(tmp_path / "wal", port, tmp_path / "tracker.log", "--auth-token-file", str(token_file))

    async def run() -> None:
        async with TrackerClient(f"127.0.0.1:{port}", "admin", auth_token=longest, connect_timeout=10) as client:
            assert (await client.status())["streams"] == {}

    try:
        asyncio.run(run())
    finally:
        assert stop_process(proc) == 0
