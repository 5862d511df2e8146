"""The server against raw sockets: hostile frames, auth, durable replies, metrics."""

from __future__ import annotations

import asyncio
import select
import struct
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.block_info import InvalidMessage
from sluice.tracker.client.sync_client import SyncTrackerClient
from sluice.tracker.client.tracker_client import TrackerAuthError
from sluice.tracker.server.metrics import sample
from sluice.tracker.wire.protocol import OPS, Limits
from tests.tracker.conftest import RawPeer, ThreadServer, make_block


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    srv = ThreadServer(tmp_path_factory.mktemp("wal"))
    yield srv
    srv.stop()


def bad_frames_total() -> float:
    reasons = (
        "too_large",
        "undecodable",
        "not_a_map",
        "invalid",
        "unknown_op",
        "no_hello",
        "unauthorized",
        "bad_version",
    )
    return sum(sample("sluice_tracker_bad_frames_total", {"reason": r}) for r in reasons)


# --- hostile frames -------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
_op_names = st.sampled_from(sorted(set(OPS) - {"hello", "status"}))


@st.composite
def wrong_types(draw: Any) -> dict:
    """A known op with one required field of the wrong type (never a valid request)."""
    op = OPS[draw(_op_names)]
    required = [f for f, spec in op.fields.items() if spec.required]
    msg: dict = {"op": op.name, "id": draw(st.integers(0, 2**31))}
    for name, spec in op.fields.items():
        msg[name] = draw(_values.filter(partial(_rejects, spec)))
    if not required:
        msg["id"] = draw(st.text(max_size=5))
    return msg


@st.composite
def missing_fields(draw: Any) -> dict:
    op = OPS[draw(_op_names)]
    required = [f for f, spec in op.fields.items() if spec.required]
    msg: dict = {"op": op.name}
    if required and draw(st.booleans()):
        msg["id"] = draw(st.integers(0, 2**31))
        skip = draw(st.sampled_from(required))
        msg.update({f: 1 for f in required if f != skip})
    return msg  # no id, or a required field missing


@st.composite
def bad_blocks(draw: Any) -> dict:
    """add_block whose block map lacks a required field or has one of a wrong type."""
    wire = make_block("hostile").to_wire()
    key = draw(st.sampled_from(["stream_id", "block_id", "receiver_id", "num_records", "location"]))
    if draw(st.booleans()):
        del wire[key]
    else:
        wire[key] = draw(_values.filter(lambda v: not isinstance(v, (int, str)) or isinstance(v, bool)))
    return {"op": "add_block", "id": 1, "block": wire}


unknown_ops = st.builds(
    lambda name, rid: {"op": name, "id": rid},
    st.text(min_size=1, max_size=30).filter(lambda n: n not in OPS),
    st.integers(0, 100),
)
maps = st.one_of(wrong_types(), missing_fields(), bad_blocks(), unknown_ops)
payloads = st.one_of(
    maps.map(lambda m: msgpack.packb(m)),
    st.binary(max_size=64).filter(lambda b: not _is_valid_map(b)),
    _values.filter(lambda v: not isinstance(v, dict)).map(lambda v: msgpack.packb(v)),
)


def _accepts(spec: Any, value: Any) -> bool:
    try:
        spec.check(value, "x")
        return True
    except InvalidMessage:
        return False


def _rejects(spec: Any, value: Any) -> bool:
    return not _accepts(spec, value)


def _is_valid_map(data: bytes) -> bool:
    try:
        return isinstance(msgpack.unpackb(data), dict)
    except Exception:  # noqa: BLE001 - any failure to decode means not a frame
        return False


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(frames=st.lists(payloads, min_size=1, max_size=8), oversized=st.booleans(), with_hello=st.booleans())
def test_hostile_frames_are_answered_counted_and_change_nothing(
    server: ThreadServer, frames: list[bytes], oversized: bool, with_hello: bool
) -> None:
    good = SyncTrackerClient(server.address, "admin")
    good.start()
    try:
        before_status = good.status()
        before_bad = bad_frames_total()
        peer = RawPeer(server.port)
        sent = 0
        if with_hello:
            assert "ok" in peer.hello()
        for payload in frames:
            peer.send_raw(struct.pack(">I", len(payload)) + payload)
            sent += 1
            reply = peer.recv()
            assert reply is not None and "error" in reply and reply["error"]["code"]
            if not with_hello:  # the first frame had to be hello: refused and closed
                assert reply["error"]["code"] in ("hello_required", "invalid", "unknown_op", "bad_frame")
                break
        if oversized and with_hello:
            peer.send_raw(struct.pack(">I", Limits().max_frame + 1) + b"\x80")
            sent += 1
            reply = peer.recv()
            assert reply["error"]["code"] == "frame_too_large"
            assert peer.recv() is None  # closed: the stream cannot be resynchronised
        peer.close()
        # Meanwhile a well-formed client is answered correctly, and nothing changed.
        assert good.status() == before_status
        assert bad_frames_total() - before_bad == sent
    finally:
        good.close()


def test_server_still_serves_after_the_hostile_run(server: ThreadServer) -> None:
    with SyncTrackerClient(server.address, "admin") as client:
        client.register_receiver(0, "r0", "h")
        assert client.add_block(make_block("fine")).accepted
        assert [b.block_id for b in client.allocate_blocks(10**12)[0]] == ["fine"]


def test_peer_that_stops_mid_frame_costs_nothing(server: ThreadServer) -> None:
    peer = RawPeer(server.port)
    peer.send_raw(struct.pack(">I", 1000) + b"\x81")
    peer.close()
    with SyncTrackerClient(server.address, "admin") as client:
        assert "streams" in client.status()


# --- auth -----------------------------------------------------------------------------------


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[ThreadServer]:
    srv = ThreadServer(tmp_path / "wal", auth_token="s3cret-token")
    yield srv
    srv.stop()


def test_hello_without_the_token_is_refused_and_counted(auth_server: ThreadServer) -> None:
    before = sample("sluice_tracker_bad_frames_total", {"reason": "unauthorized"})
    for token in (None, "", "wrong"):
        peer = RawPeer(auth_server.port)
        reply = peer.hello(token=token)
        assert reply["error"]["code"] == "unauthorized"
        assert peer.recv() is None  # closed
        peer.close()
    assert sample("sluice_tracker_bad_frames_total", {"reason": "unauthorized"}) - before == 3
    peer = RawPeer(auth_server.port)  # no hello at all: nothing else is served
    peer.send({"op": "status", "id": 1})
    assert peer.recv()["error"]["code"] == "hello_required"
    peer.close()
    client = SyncTrackerClient(auth_server.address, "admin", auth_token="wrong", connect_timeout=10)
    with pytest.raises(TrackerAuthError):
        client.start()
    client.close()
    with SyncTrackerClient(auth_server.address, "admin", auth_token="s3cret-token") as client:
        assert client.status()["streams"] == {}


def test_roles_limit_ops_and_version_is_checked(auth_server: ThreadServer) -> None:
    peer = RawPeer(auth_server.port)
    assert "ok" in peer.hello(role="receiver", token="s3cret-token")
    peer.send({"op": "allocate_blocks", "id": 7, "batch_time_ms": 1})
    reply = peer.recv()
    assert reply["id"] == 7 and reply["error"]["code"] == "forbidden"
    peer.close()
    peer = RawPeer(auth_server.port)
    peer.send({"op": "hello", "id": 0, "version": 99, "role": "admin", "token": "s3cret-token"})
    assert peer.recv()["error"]["code"] == "unsupported_version"
    peer.close()


# --- durability and metrics -----------------------------------------------------------------


def test_replies_follow_durability_and_metrics_report_state(tmp_path: Path) -> None:
    srv = ThreadServer(tmp_path / "wal")
    try:
        before_ok = sample("sluice_tracker_requests_total", {"op": "add_block", "outcome": "ok"})
        before_fsyncs = sample("sluice_tracker_wal_fsync_seconds_count")
        with SyncTrackerClient(srv.address, "admin") as client:
            client.register_receiver(4, "r", "h")
            for i in range(3):
                assert client.add_block(make_block(f"b{i}", stream=4, records=7)).accepted
            commit = srv.server.commit
            assert commit.durable == commit.appended  # every ack came after its fsync
            assert sample("sluice_tracker_unallocated_blocks", {"stream": "4"}) == 3
            assert sample("sluice_tracker_unallocated_records", {"stream": "4"}) == 21
            assert sample("sluice_tracker_requests_total", {"op": "add_block", "outcome": "ok"}) - before_ok == 3
            assert sample("sluice_tracker_wal_fsync_seconds_count") > before_fsyncs
            assert sample("sluice_tracker_receivers_live", {"stream": "4"}) == 1
            client.allocate_blocks(1000)
            assert sample("sluice_tracker_unallocated_blocks", {"stream": "4"}) == 0
            assert client.status()["pending_batches"] == [1000]
    finally:
        srv.stop()


def test_no_add_block_reply_while_its_fsync_is_held_back(tmp_path: Path) -> None:
    """The fsync is held on an event (a disk cannot stall on demand): the ack waits for it."""
    srv = ThreadServer(tmp_path / "wal")
    peer = RawPeer(srv.port)
    try:
        assert "ok" in peer.hello()
        peer.send({"op": "register_receiver", "id": 0, "stream_id": 0, "receiver_id": "r0", "host": "h"})
        assert "ok" in peer.recv()
        wal = srv.server.commit.wal
        write_bytes = wal.write_bytes
        entered, release = threading.Event(), threading.Event()

        def held(data: bytes) -> None:  # the group commit thread writes and fsyncs here
            entered.set()
            assert release.wait(30)
            write_bytes(data)

        wal.write_bytes = held
        peer.send({"op": "add_block", "id": 1, "block": make_block("held").to_wire()})
        assert entered.wait(10)  # the BlockAdded event is in the write, not yet durable
        ready, _, _ = select.select([peer.sock], [], [], 0.5)
        assert not ready, "a reply arrived before the fsync finished"
        release.set()
        reply = peer.recv()
        assert reply["id"] == 1 and reply["ok"]["accepted"] is True, reply
        assert srv.server.commit.durable == srv.server.commit.appended
    finally:
        release.set()
        peer.close()
        srv.stop()


def test_a_failing_disk_stops_acknowledgements_and_fails_the_server(tmp_path: Path) -> None:
    srv = ThreadServer(tmp_path / "wal")
    try:
        commit = srv.server.commit

        def broken(data: bytes) -> None:
            raise OSError(5, "Input/output error")

        peer = RawPeer(srv.port)
        assert "ok" in peer.hello()
        peer.send({"op": "register_receiver", "id": 0, "stream_id": 0, "receiver_id": "r0", "host": "h"})
        assert "ok" in peer.recv()  # logged before the disk breaks
        commit.wal.write_bytes = broken
        peer.send({"op": "add_block", "id": 1, "block": make_block("lost").to_wire()})
        srv.call(asyncio.wait_for(srv.server.failed.wait(), 10))  # the service will exit 1 (cli)
        assert isinstance(srv.server.failure, OSError)
        peer.send({"op": "add_block", "id": 2, "block": make_block("later").to_wire()})
        reply = peer.recv()
        assert reply["id"] == 2 and reply["error"]["code"] == "unavailable", reply  # never an ack that is not durable
        assert commit.durable < commit.appended
        peer.close()
    finally:
        srv.stop()
