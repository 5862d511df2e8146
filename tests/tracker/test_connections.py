"""Connections cannot exhaust the tracker: replies are built no faster than a peer reads them,
sockets without hello have their own cap, a frame begun must finish within its deadline,
``report_error`` is logged within a budget, and out of file descriptors the tracker refuses
connections but keeps its log.  Each against a real tracker process and raw sockets."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from sluice import embedded
from sluice.block_info import ReceivedBlockInfo, block_id_prefix
from sluice.embedded import TrackerProcess
from sluice.embedded.processes import TRACKER_MODULE, free_port, start_service, stop_process, tracker_argv
from sluice.tracker.client.tracker_client import TrackerClient
from tests.tracker.conftest import BLOCKS, RawPeer


def port_of(tracker: TrackerProcess) -> int:
    return int(tracker.address.rpartition(":")[2])


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def frame(message: dict) -> bytes:
    payload = msgpack.packb(message)
    return len(payload).to_bytes(4, "big") + payload


@pytest.fixture
def tracker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TrackerProcess]:
    args = getattr(request, "param", [])
    proc = embedded.start_tracker(tmp_path / "wal", args=args)
    yield proc
    proc.stop()


@pytest.mark.slow
def test_pipelined_status_requests_are_answered_no_faster_than_they_are_read(tracker: TrackerProcess) -> None:
    owner = RawPeer(port_of(tracker))
    assert "ok" in owner.hello()
    batch = b""
    for i in range(400):  # long peer-chosen strings: each status reply is about 400 KB
        batch += frame(
            {"op": "register_receiver", "id": i, "stream_id": 0, "receiver_id": f"r{i:03d}", "host": "h" * 256}
        )
        batch += frame(
            {"op": "report_error", "id": i, "stream_id": 0, "receiver_id": f"r{i:03d}", "message": "e" * 4096}
        )
    owner.send_raw(batch)
    for _ in range(800):
        assert "ok" in owner.recv()
    sink = RawPeer(port_of(tracker))
    assert "ok" in sink.hello("driver")
    sink.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    before = rss_bytes(tracker.proc.pid)
    sink.send_raw(b"".join(frame({"op": "status", "id": i}) for i in range(150)))  # and never read
    probe = RawPeer(port_of(tracker))  # answered once the loop has handled the pipelined read
    assert "ok" in probe.hello("driver")
    probe.send({"op": "status", "id": 1})
    assert probe.recv()["ok"]["receiver_count"] == 400
    grown = rss_bytes(tracker.proc.pid) - before
    assert grown < 24 << 20, f"the tracker grew by {grown >> 20} MiB"  # 150 replies built at once: about 100 MiB


@pytest.mark.slow
@pytest.mark.parametrize("tracker", [["--max-pending-hellos", "8", "--max-connections", "40"]], indirect=True)
async def test_sockets_without_hello_cannot_lock_out_authenticated_clients(tracker: TrackerProcess) -> None:
    silent = [socket.create_connection(("127.0.0.1", port_of(tracker))) for _ in range(60)]
    try:
        clients = [TrackerClient(tracker.address, "admin", connect_timeout=5) for _ in range(27)]  # hello_timeout: 10 s
        await asyncio.gather(*(c.start() for c in clients))
        try:
            replies = await asyncio.gather(*(c.status() for c in clients))
            assert all("receivers" in r for r in replies)
        finally:
            await asyncio.gather(*(c.close() for c in clients))
    finally:
        for s in silent:
            s.close()


@pytest.mark.slow
@pytest.mark.parametrize("tracker", [["--frame-timeout-ms", "300"]], indirect=True)
def test_a_frame_begun_must_be_complete_within_the_deadline(tracker: TrackerProcess) -> None:
    peer = RawPeer(port_of(tracker))
    assert "ok" in peer.hello()
    peer.send_raw(b"\x00\x10\x00\x00" + b"\x81" * 1000)  # a 1 MiB frame begun, never finished
    peer.sock.settimeout(10)  # the idle timeout is 600 s: only the frame deadline closes it this soon
    assert peer.recv() is None


@pytest.mark.parametrize("tracker", [["--error-reports-per-minute", "5"]], indirect=True)
def test_report_error_is_logged_within_each_receivers_budget(tracker: TrackerProcess) -> None:
    peer = RawPeer(port_of(tracker))
    assert "ok" in peer.hello("receiver")
    peer.send({"op": "register_receiver", "id": 0, "stream_id": 0, "receiver_id": "noisy", "host": "h"})
    assert "ok" in peer.recv()
    flood = {"op": "report_error", "stream_id": 0, "receiver_id": "noisy", "message": "x" * 4000}
    peer.send_raw(b"".join(frame({**flood, "id": i}) for i in range(1, 2001)))
    for _ in range(2000):
        assert "ok" in peer.recv()
    lines = [line for line in tracker.log.read_text().splitlines() if "receiver noisy of stream 0 reports" in line]
    assert len(lines) == 5


@pytest.mark.slow
def test_out_of_file_descriptors_the_tracker_refuses_connections_and_keeps_its_log(tmp_path: Path) -> None:
    port = free_port()
    limited = (
        "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (400, 400)); "
        f"sys.argv[0] = 'sluice-tracker'; runpy.run_module({TRACKER_MODULE!r}, run_name='__main__')"
    )
    args = tracker_argv(
        f"127.0.0.1:{port}",
        tmp_path / "wal",
        block_store=BLOCKS,
        extra=["--wal-segment-bytes", "2048"],
        program=["-c", limited],
    )
    proc = start_service(args, port=port, log=tmp_path / "tracker.log", name="sluice-tracker")
    flood: list[socket.socket] = []
    try:

        async def run() -> None:
            async with TrackerClient(f"127.0.0.1:{port}", "receiver") as client:
                await client.register_receiver(0, "r0", "h")
                refused = 0
                for _ in range(500):  # one by one, each held once in: more than the process may open
                    try:
                        peer = RawPeer(port)
                        reply = peer.hello()
                    except OSError:
                        break
                    if reply is None or "error" in reply:
                        refused += 1
                        peer.close()
                    else:
                        flood.append(peer.sock)
                assert refused > 0 and len(flood) < 400
                prefix = block_id_prefix(0, "r0", client.incarnation("r0"))
                for i in range(200):  # the log rolls many times meanwhile
                    bid = f"{prefix}{i}"
                    info = ReceivedBlockInfo(0, bid, "r0", 1, f"{BLOCKS}/stream-0/{bid}.blk")
                    assert (await asyncio.wait_for(client.add_block(info), 20)).accepted

        asyncio.run(run())
        assert proc.poll() is None, "the tracker stopped"
    finally:
        for s in flood:
            s.close()
        stop_process(proc)
    log = (tmp_path / "tracker.log").read_text()
    assert "lowered to" in log
    assert "Too many open files" not in log  # the connections never took the descriptors the log needs
