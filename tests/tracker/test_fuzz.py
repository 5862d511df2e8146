"""Fuzz a live tracker process: 10,000+ generated frames over every op, then it still serves.

Each frame is a well-formed request of some op with one field replaced by a hostile value (a
wrong type, an out-of-range integer, a long string, a deep map), a request for an op the
connection's role may not send, an unknown op, or raw garbage.  Each was checked locally to be
one the schema refuses, so the tracker's state must be exactly what it was; afterwards a good
client gets answers, the state is unchanged and resident memory stayed bounded.
"""

from __future__ import annotations

import random
import socket
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest

from sluice import embedded
from sluice.block_info import InvalidMessage
from sluice.tracker.client.sync_client import SyncTrackerClient
from sluice.tracker.wire.protocol import OPS, PROTOCOL_VERSION, UnknownOp, check_request
from tests.tracker.conftest import BLOCKS, make_block

FRAMES = 10_500
PER_CONNECTION = 15  # below the bad-frame limit (16): every frame is answered, then a new connection

VALID: dict[str, dict[str, Any]] = {
    "register_receiver": {"stream_id": 0, "receiver_id": "r-fuzz", "host": "h"},
    "deregister_receiver": {"receiver_id": "r-fuzz", "reason": "x"},
    "heartbeat": {"receiver_id": "r-fuzz", "lag": 3},
    "add_block": {"block": make_block("fuzz").to_wire()},
    "allocate_blocks": {"batch_time_ms": 1000, "max_records": [[0, 10]]},
    "get_blocks_of_batch": {"batch_time_ms": 1000},
    "batch_completed": {"batch_info": {"batch_time_ms": 1000}},
    "publish_rate": {"stream_id": 0, "rate": 10.0},
    "report_error": {"stream_id": 0, "receiver_id": "r-fuzz", "message": "m"},
    "status": {},
}


def _deep(n: int) -> dict:
    tree: dict = {}
    for _ in range(n):
        tree = {"k": tree}
    return tree


def hostile_value(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            True,
            -1,
            2**63,
            2**64 - 1,
            -(2**63),
            1.5,
            float("nan"),
            float("inf"),
            "",
            "x" * rng.randint(257, 5000),
            b"\x00\xff",
            [],
            [[1]],
            [[0, 0]],
            [[-1, 5]],
            {},
            {"a": 1},
            _deep(rng.randint(9, 300)),
            {"k": "v" * 20_000},
            list(range(rng.randint(0, 50))),
            rng.randint(-(2**63), 2**64 - 1),
        ]
    )


def hostile_block(rng: random.Random) -> dict:
    wire = make_block("fuzz").to_wire()
    key = rng.choice(["stream_id", "block_id", "receiver_id", "num_records", "location", "offset_ranges", "metadata"])
    wire[key] = rng.choice(
        [
            hostile_value(rng),
            "file:///dev/zero",
            "file:///etc/passwd",
            _deep(1020),
            [["t", 0, 5, 2**64 - 1]],
            [["t", -1, 0, 1]],
            2**31,
        ]
    )
    return wire


def known_hostile() -> list[bytes]:
    """Frames of the issue's findings, included whatever the schema says (the generator asks it)."""
    deep = make_block("deep").to_wire() | {"metadata": _deep(1020)}
    huge = make_block("huge").to_wire() | {"num_records": 2**64 - 1}
    zero = make_block("zero").to_wire() | {"location": "file:///dev/zero"}
    return [msgpack.packb({"op": "add_block", "id": 7, "block": block}) for block in (deep, huge, zero)] + [
        msgpack.packb({"op": "allocate_blocks", "id": 7, "batch_time_ms": 2**62}),
        msgpack.packb(
            {
                "op": "register_receiver",
                "id": 7,
                "stream_id": 0,
                "receiver_id": "r" * 100_000,
                "host": "h",
            }
        ),
    ]


def refused(msg: dict) -> bool:
    try:
        check_request(dict(msg))
    except (InvalidMessage, UnknownOp):
        return True
    return False


def generate(rng: random.Random) -> tuple[str, bytes]:
    """(role the connection must have said for the frame to be refused as intended, frame payload)."""
    kind = rng.random()
    if kind < 0.05:
        return "admin", bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 40)))
    if kind < 0.08:
        return "admin", msgpack.packb({"op": "op-" + str(rng.random()), "id": 1})
    name = rng.choice(sorted(VALID))
    role = "driver" if "receiver" in OPS[name].roles else "receiver"
    if kind < 0.2 and role not in OPS[name].roles:  # a good request the role may not send: forbidden
        return role, msgpack.packb({"op": name, "id": 1, **VALID[name]})
    while True:
        msg = {"op": name, "id": rng.randint(0, 2**31), **VALID[name]}
        if name == "add_block" and rng.random() < 0.6:
            msg["block"] = hostile_block(rng)
        elif msg.keys() - {"op", "id"}:
            msg[rng.choice(sorted(msg.keys() - {"op", "id"}))] = hostile_value(rng)
        else:
            msg["id"] = hostile_value(rng) if rng.random() < 0.5 else "id"
        if refused(msg):
            return "admin", msgpack.packb(msg)


class Peer:
    def __init__(self, port: int, role: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.file = self.sock.makefile("rb")
        self.send([msgpack.packb({"op": "hello", "id": 0, "version": PROTOCOL_VERSION, "role": role})])
        assert "ok" in self.recv()

    def send(self, payloads: list[bytes]) -> None:
        self.sock.sendall(b"".join(struct.pack(">I", len(p)) + p for p in payloads))

    def recv(self) -> dict:
        (n,) = struct.unpack(">I", self.file.read(4))
        return msgpack.unpackb(self.file.read(n), strict_map_key=False)

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_ten_thousand_hostile_frames_change_nothing(tmp_path: Path) -> None:
    rng = random.Random(13)
    frames = [generate(rng) for _ in range(FRAMES)] + [("admin", f) for f in known_hostile()]
    by_role: dict[str, list[bytes]] = {}
    for role, payload in frames:
        by_role.setdefault(role, []).append(payload)
    tracker = embedded.start_tracker(tmp_path / "wal", block_store=BLOCKS)
    try:
        with SyncTrackerClient(tracker.address, "admin") as good:
            good.register_receiver(0, "r-good", "h")
            good.add_block(make_block("kept", records=7))
            good.publish_rate(0, 50.0)
            before = good.status()
            rss_before = rss_kib(tracker.proc.pid)
            answered = 0
            for role, payloads in by_role.items():
                for start in range(0, len(payloads), PER_CONNECTION):
                    chunk = payloads[start : start + PER_CONNECTION]
                    peer = Peer(int(tracker.address.rpartition(":")[2]), role)
                    peer.send(chunk)
                    for _ in chunk:
                        assert "error" in peer.recv()
                        answered += 1
                    peer.close()
            assert answered == len(frames)
            after = good.status()
            for state in (before, after):  # the good receiver's last heartbeat time is not state
                for r in state["receivers"].values():
                    r.pop("last_seen_ms")
            assert after == before
            assert [b.block_id for b in good.allocate_blocks(10**12)[0]] == ["kept"]
            assert rss_kib(tracker.proc.pid) - rss_before < 64 * 1024
        assert tracker.proc.poll() is None
    finally:
        tracker.stop()
