"""The hostile-client suite: one test per way a peer could harm the tracker (oversized or malformed
frames, wrong roles, locations outside the store, connection floods, ...), each against the real
server (in process, raw sockets) or the real pieces it guards."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.block_info import ReceivedBlockInfo
from sluice.clock import ManualClock
from sluice.tracker.client.sync_client import SyncTrackerClient
from sluice.tracker.server.auth import Credentials
from sluice.tracker.server.connection import AcceptErrors, Throttle
from sluice.tracker.server.metrics import sample
from sluice.tracker.server.service import TrackerService
from sluice.tracker.wire.protocol import OPS
from sluice.tracker.wire.schema import MAX_DEPTH
from tests.tracker.conftest import RawPeer, ThreadServer, make_block

RECEIVER_TOKEN, DRIVER_TOKEN, FULL_TOKEN = "r-token-1", "d-token-2", "full-token-3"


def register(peer: RawPeer, stream: int = 0, receiver: str = "r0") -> int:
    """Register ``receiver`` on ``stream``; returns the incarnation the tracker assigned."""
    peer.send({"op": "register_receiver", "id": 100, "stream_id": stream, "receiver_id": receiver, "host": "h"})
    reply = peer.recv()
    assert reply is not None and "ok" in reply, reply
    return reply["ok"]["incarnation"]


def request(peer: RawPeer, op: str, **fields: object) -> dict:
    peer.send({"op": op, "id": 1, **fields})
    reply = peer.recv()
    assert reply is not None
    return reply


@pytest.fixture
def roles_server(tmp_path: Path) -> Iterator[ThreadServer]:
    srv = ThreadServer(
        tmp_path / "wal",
        open_kwargs={"block_stores": [f"file://{tmp_path}/store"]},
        credentials=Credentials.from_tokens(FULL_TOKEN, RECEIVER_TOKEN, DRIVER_TOKEN),
    )
    yield srv
    srv.stop()


# --- 1: locations ---------------------------------------------------------------------------


def test_1_add_block_outside_the_store_is_refused_counted_and_not_logged(
    roles_server: ThreadServer, tmp_path: Path
) -> None:
    peer = RawPeer(roles_server.port)
    assert "ok" in peer.hello("receiver", RECEIVER_TOKEN)
    bid = f"input-0-r0-{register(peer)}-1"
    before = sample("sluice_tracker_locations_refused_total", {"where": "add_block"})
    appended = roles_server.server.commit.appended
    for location in (
        "file:///etc/passwd",
        "file:///dev/zero",
        f"file://{tmp_path}/store/stream-0/../../x/stream-0/{bid}.blk",
        f"file://{tmp_path}/elsewhere/stream-0/{bid}.blk",
        f"file://{tmp_path}/store/stream-1/{bid}.blk",
    ):
        wire = ReceivedBlockInfo(0, bid, "r0", 1, location).to_wire()
        reply = request(peer, "add_block", block=wire)
        assert reply["error"]["code"] == "invalid" and "refused" in reply["error"]["message"], location
    assert sample("sluice_tracker_locations_refused_total", {"where": "add_block"}) - before == 5
    assert roles_server.server.commit.appended == appended  # nothing reached the WAL
    good = ReceivedBlockInfo(0, bid, "r0", 1, f"file://{tmp_path}/store/stream-0/{bid}.blk").to_wire()
    assert request(peer, "add_block", block=good)["ok"]["accepted"]


# --- 2: roles -------------------------------------------------------------------------------


def test_2_roles_come_from_the_credential_and_a_wrong_role_changes_nothing(roles_server: ThreadServer) -> None:
    peer = RawPeer(roles_server.port)
    assert peer.hello("driver", RECEIVER_TOKEN)["error"]["code"] == "unauthorized"  # a receiver token says driver
    assert peer.recv() is None
    peer = RawPeer(roles_server.port)
    assert peer.hello("admin", DRIVER_TOKEN)["error"]["code"] == "unauthorized"
    receiver = RawPeer(roles_server.port)
    assert "ok" in receiver.hello("receiver", RECEIVER_TOKEN)
    driver = RawPeer(roles_server.port)
    assert "ok" in driver.hello("driver", DRIVER_TOKEN)
    status = request(driver, "status")["ok"]
    before = sample("sluice_tracker_requests_total", {"op": "allocate_blocks", "outcome": "forbidden"})
    appended = roles_server.server.commit.appended
    forbidden: list[tuple[RawPeer, str, dict[str, Any]]] = [
        (receiver, "allocate_blocks", {"batch_time_ms": 1000}),
        (receiver, "batch_completed", {"batch_info": {"batch_time_ms": 1000}}),
        (receiver, "publish_rate", {"stream_id": 0, "rate": 1.0}),
        (receiver, "get_blocks_of_batch", {"batch_time_ms": 1000}),
        (driver, "register_receiver", {"stream_id": 0, "receiver_id": "x", "host": "h"}),
        (driver, "add_block", {"block": make_block("x").to_wire()}),
        (driver, "heartbeat", {"receiver_id": "x"}),
        (driver, "deregister_receiver", {"receiver_id": "x"}),
        (driver, "report_error", {"stream_id": 0, "receiver_id": "x", "message": "m"}),
    ]
    for peer, op, fields in forbidden:
        assert request(peer, op, **fields)["error"]["code"] == "forbidden", op
    assert sample("sluice_tracker_requests_total", {"op": "allocate_blocks", "outcome": "forbidden"}) - before == 1
    assert roles_server.server.commit.appended == appended
    assert request(driver, "status")["ok"] == status  # nothing changed
    assert "streams" in request(receiver, "status")["ok"]  # both roles read status (a receiver its own view)
    # Every op is in exactly one role's set, or both (status), and admin has them all; an operator's
    # op (skip_block) is admin's alone.
    for spec in OPS.values():
        assert "admin" in spec.roles and (spec.roles != ("admin",)) == (spec.name != "skip_block")
    with SyncTrackerClient(roles_server.address, "admin", auth_token=FULL_TOKEN) as admin:
        assert admin.status() == status


def test_2_allocate_refuses_batch_times_far_in_the_future() -> None:
    clock = ManualClock(1_700_000_000_000)
    service = TrackerService(clock=clock, max_batch_ahead_ms=3_600_000)
    from sluice.block_info import InvalidMessage

    with pytest.raises(InvalidMessage, match="past the tracker's clock"):
        service.op_allocate_blocks({"batch_time_ms": 2**62}, None)
    assert service.tracker.last_allocated_ms is None  # the real driver's next batch still allocates
    ok, _ = service.op_allocate_blocks({"batch_time_ms": int(clock.now_ms()) + 1000}, None)
    assert ok["allocated"]
    ok, _ = service.op_allocate_blocks({"batch_time_ms": int(clock.now_ms())}, None)  # not later: refused
    assert not ok["allocated"]


# --- 3, 7, 8: the schema --------------------------------------------------------------------


def _deep(levels: int) -> dict:
    tree: dict = {}
    for _ in range(levels):
        tree = {"a": tree}
    return tree


def test_3_deep_metadata_is_refused_before_the_wal(roles_server: ThreadServer) -> None:
    peer = RawPeer(roles_server.port)
    assert "ok" in peer.hello("admin", FULL_TOKEN)
    register(peer)
    appended = roles_server.server.commit.appended
    for metadata in (_deep(1020), _deep(MAX_DEPTH + 1), {"k": "x" * 20_000}, {str(i): i for i in range(2000)}):
        wire = make_block("deep").to_wire()
        wire["location"] = f"{roles_server.server.service.block_stores[0]}/stream-0/deep.blk"
        wire["metadata"] = metadata
        reply = request(peer, "add_block", block=wire)
        assert reply["error"]["code"] == "invalid" and "metadata" in reply["error"]["message"]
    for info in (_deep(1020), {"x": [[[[[[[[[[1]]]]]]]]]]}):
        reply = request(peer, "batch_completed", batch_info={"batch_time_ms": 1, **info})
        assert reply["error"]["code"] == "invalid" and "batch_info" in reply["error"]["message"]
    assert roles_server.server.commit.appended == appended


def test_7_record_counts_and_offsets_must_be_below_2_63_and_status_stays_encodable(
    roles_server: ThreadServer, tmp_path: Path
) -> None:
    peer = RawPeer(roles_server.port)
    assert "ok" in peer.hello("admin", FULL_TOKEN)
    register(peer)
    store = f"file://{tmp_path}/store"
    for i, (records, offset) in enumerate(((2**64 - 1, 0), (2**63, 0), (1, 2**63))):
        wire = ReceivedBlockInfo(0, f"b{i}", "r0", 1, f"{store}/stream-0/b{i}.blk").to_wire()
        wire["num_records"] = records
        wire["offset_ranges"] = [["t", 0, offset, offset]]
        assert request(peer, "add_block", block=wire)["error"]["code"] == "invalid"
    for i, answer in enumerate(("ok", "busy", "busy")):  # the largest allowed; then the queue bound holds
        wire = ReceivedBlockInfo(0, f"max{i}", "r0", 2**63 - 1, f"{store}/stream-0/max{i}.blk").to_wire()
        reply = request(peer, "add_block", block=wire)
        assert reply["ok"]["accepted"] if answer == "ok" else reply["error"]["code"] == answer, reply
    status = request(peer, "status")["ok"]
    assert status["streams"][0]["unallocated_records"] == 2**63 - 1


def test_8_strings_are_bounded_and_junk_streams_are_refused(roles_server: ThreadServer, tmp_path: Path) -> None:
    peer = RawPeer(roles_server.port)
    assert "ok" in peer.hello("admin", FULL_TOKEN)
    for fields in ({"receiver_id": "r" * 257, "host": "h"}, {"receiver_id": "r", "host": "h" * 10_000}):
        reply = request(peer, "register_receiver", stream_id=0, **fields)
        assert reply["error"]["code"] == "invalid"
    appended = roles_server.server.commit.appended
    for stream in (7, 123456):  # no registered receiver feeds them
        wire = ReceivedBlockInfo(stream, "j", "r0", 1, f"file://{tmp_path}/store/stream-{stream}/j.blk").to_wire()
        assert request(peer, "add_block", block=wire)["error"]["code"] == "not_registered"
    assert request(peer, "add_block", block={**wire, "stream_id": 2**40})["error"]["code"] == "invalid"
    assert roles_server.server.commit.appended == appended
    assert request(peer, "status")["ok"]["streams"] == {}


def test_8_dead_receivers_expire_and_idle_streams_are_forgotten() -> None:
    clock = ManualClock(1_000_000)
    service = TrackerService(clock=clock, liveness_timeout_ms=10_000, remember_ms=30_000)
    service.op_register_receiver({"stream_id": 3, "receiver_id": "crashed-4711", "host": "h"}, None)
    service.op_add_block({"block": make_block("b", stream=3)}, None)
    service.op_allocate_blocks({"batch_time_ms": 1}, None)
    clock.advance(10_001)
    service.check_liveness()
    assert service.status()["receivers"] == {}  # expired: it left status
    assert 3 in service.status()["streams"]
    clock.advance(29_999)
    service.check_liveness()
    assert 3 in service.status()["streams"]
    clock.advance(1)
    service.check_liveness()
    assert service.status()["streams"] == {}  # no receiver, no block for remember_ms: forgotten
    assert service.op_allocate_blocks({"batch_time_ms": 2}, None)[0]["blocks"]["streams"] == []  # nothing allocated


# --- 4, 5: connections ----------------------------------------------------------------------


def test_4_connections_are_bounded_before_and_after_hello(tmp_path: Path) -> None:
    srv = ThreadServer(
        tmp_path / "wal", max_connections=3, hello_timeout_s=0.2, idle_timeout_s=0.5, liveness_interval_s=0.05
    )
    try:
        silent = RawPeer(srv.port)  # never says hello: closed at the deadline
        silent.sock.settimeout(5)
        assert silent.recv() is None
        big = RawPeer(srv.port)  # a frame before hello larger than a hello needs: refused, closed
        big.send({"op": "hello", "id": 0, "pad": "x" * 5000})
        assert big.recv()["error"]["code"] == "frame_too_large" and big.recv() is None
        junk = RawPeer(srv.port)  # one bad frame before hello: closed
        junk.send_raw(b"\x00\x00\x00\x01\xc1")
        assert junk.recv()["error"]["code"] == "bad_frame" and junk.recv() is None
        chatty = RawPeer(srv.port)  # after hello, repeated bad frames: closed
        assert "ok" in chatty.hello()
        chatty.send_raw(b"\x00\x00\x00\x01\xc1" * 16)
        assert [chatty.recv()["error"]["code"] for _ in range(16)] == ["bad_frame"] * 16
        assert chatty.recv() is None
        peers = [RawPeer(srv.port) for _ in range(3)]
        for p in peers:
            assert "ok" in p.hello()
        refused_before = sample("sluice_tracker_connections_closed_total", {"reason": "max_connections"})
        extra = RawPeer(srv.port)  # over max_connections: its hello is refused, then it is closed
        extra.sock.settimeout(5)
        assert extra.hello()["error"]["code"] == "limit" and extra.recv() is None
        assert sample("sluice_tracker_connections_closed_total", {"reason": "max_connections"}) == refused_before + 1
        for p in peers:  # idle past the timeout: closed
            p.sock.settimeout(5)
            assert p.recv() is None
        assert sample("sluice_tracker_connections_closed_total", {"reason": "idle"}) >= 3
    finally:
        srv.stop()


def test_5_accept_errors_are_counted_and_logged_at_a_bounded_rate(caplog: pytest.LogCaptureFixture) -> None:
    handler = AcceptErrors(Throttle())
    loop = asyncio.new_event_loop()
    before = sample("sluice_tracker_accept_errors_total")
    try:
        with caplog.at_level(logging.ERROR, logger="sluice.tracker.server.server"):
            for _ in range(1000):
                handler(
                    loop,
                    {
                        "message": "socket.accept() out of system resources",
                        "exception": OSError(24, "Too many open files"),
                    },
                )
    finally:
        loop.close()
    assert sample("sluice_tracker_accept_errors_total") - before == 1000
    lines = [r for r in caplog.records if "accepting connections fails" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None


def test_9_client_tls_verifies_the_tracker_and_both_ends_need_tls_1_2(tmp_path: Path) -> None:
    import ssl

    from sluice.config import ConfigError
    from sluice.embedded.certs import self_signed
    from sluice.tracker.wire.tls import client_context, server_context

    pair = self_signed(tmp_path, common_name="localhost")
    cert, key = pair.cert, pair.key
    client = client_context("driver", str(cert))
    server = server_context(str(cert), str(key), client_ca=str(cert))
    assert client is not None and server is not None
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    assert server.verify_mode == ssl.CERT_REQUIRED
    assert client.minimum_version == server.minimum_version == ssl.TLSVersion.TLSv1_2
    assert client_context("driver", "") is None
    with pytest.raises(ConfigError, match="driver.tls_cert/driver.tls_key need driver.tls_ca"):
        client_context("driver", "", str(cert), str(key))
