"""A hostile receiver credential cannot cost a real receiver one record: while a credential for
stream 1 runs the known attacks in a loop (foreign blocks, pre-claimed block ids, absurd offset
claims, takeover, heartbeat and deregister of another's id, pipelined status, error floods, sockets
that never say hello, frames never finished; blocks on its own stream are the driver's to refuse,
not the tracker's), a real receiver process on stream 0 and the driver
process Kafka records: each comes out exactly once, the tracker and the driver never stop, and the
tracker's memory stays under a stated bound."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import msgpack
import pytest

from sluice import embedded
from sluice.block_info import ReceivedBlockInfo
from sluice.embedded import receiver_argv, start_service, stop_process, wait_until
from sluice.spark_driver import StreamingDriver
from sluice.tracker.client.sync_client import SyncTrackerClient
from tests.driver.test_end_to_end import produce, read_values
from tests.tracker.conftest import RawPeer
from tests.tracker.test_connections import rss_bytes
from tests.tracker.test_identity import ATTACKER_TOKEN, DRIVER_TOKEN, tracker_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

TOTAL = 50_000
RSS_BOUND = 400 << 20  # the tracker's resident memory, attacks included


def frame(message: dict) -> bytes:
    payload = msgpack.packb(message)
    return len(payload).to_bytes(4, "big") + payload


def attack_once(port: int, n: int, topic: str, store: str) -> None:
    """One round of every attack a stream-1 receiver credential can run."""
    p = RawPeer(port)
    p.sock.settimeout(10)
    assert "ok" in p.hello("receiver", ATTACKER_TOKEN)

    def ask(op: str, **fields: object) -> dict:
        p.send({"op": op, "id": n, **fields})
        reply = p.recv()
        assert reply is not None
        return reply

    inc = ask("register_receiver", stream_id=1, receiver_id="attacker", host="h")["ok"]["incarnation"]
    for victim in ("w-0", "attacker"):  # takeover of the real receiver, on either stream
        ask("register_receiver", stream_id=0, receiver_id=victim, host="h" * 256, incarnation=2**63 - 1)
    ask("register_receiver", stream_id=1, receiver_id="w-0", host="h", incarnation=2**63 - 1)
    ask("heartbeat", receiver_id="w-0")
    ask("deregister_receiver", receiver_id="w-0")
    for receiver in ("w-0", "attacker"):  # absurd offsets on the real receiver's stream, under its ids
        for i in range(5):
            bid = f"input-0-{receiver}-{inc}-{n * 10 + i}"
            wire = ReceivedBlockInfo(0, bid, receiver, 1, f"{store}/stream-0/{bid}.blk").to_wire()
            wire["offset_ranges"] = [[topic, part, 100, 2**63 - 1] for part in range(4)]
            ask("add_block", block=wire)
    p.send_raw(b"".join(frame({"op": "status", "id": i}) for i in range(150)))  # pipelined, unread
    p.send_raw(
        b"".join(
            frame({"op": "report_error", "id": i, "stream_id": 1, "receiver_id": "attacker", "message": "x" * 4000})
            for i in range(200)
        )
    )
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    partial = RawPeer(port)
    partial.sock.sendall(b"\x00\x0f\xff\xff" + b"\x81" * 100)  # a frame begun, never finished
    time.sleep(0.2)  # let them be held a moment, as an attacker would
    for s in (*silent, partial.sock, p.sock):
        s.close()


def test_a_hostile_receiver_credential_costs_a_real_receiver_nothing(spark, kafka_broker, tmp_path: Path) -> None:
    topic = kafka_broker.create_topic(partitions=4)
    produce(kafka_broker.bootstrap, topic, TOTAL)
    blocks = (tmp_path / "blocks").as_uri()
    extra = f'frame_timeout_ms = 1000\nmax_pending_hellos = 16\nblock_store = "{blocks}"'
    config = tracker_config(tmp_path, extra=extra)
    tracker = embedded.start_tracker(tmp_path / "wal", args=["--config", str(config), "--no-fsync"])
    port = int(tracker.address.rpartition(":")[2])
    stop_attacks = threading.Event()
    rss = {"max": 0, "rounds": 0}

    def attacker() -> None:
        n = 0
        while not stop_attacks.is_set():
            n += 1
            try:
                attack_once(port, n, topic, blocks)
            except OSError:
                pass  # a closed socket is the tracker defending itself
            rss["max"] = max(rss["max"], rss_bytes(tracker.proc.pid))
            rss["rounds"] = n
            # A few rounds a second keep every attack running for the whole pipeline; back to back
            # they took a core from it and from every test beside it (minutes on two cores).
            stop_attacks.wait(0.25)

    out = tmp_path / "out"
    seen = {"records": 0}
    done = threading.Event()

    def fn(batch) -> None:
        batch.write_json(str(out))
        seen["records"] += batch.num_records
        if seen["records"] >= TOTAL:
            done.set()

    thread = threading.Thread(target=attacker, daemon=True)
    driver = StreamingDriver(
        spark,
        tracker=tracker.address,
        auth_token=DRIVER_TOKEN,
        block_store=blocks,
        batch_interval_ms=1000,
        initial_rate=10_000,
    )
    driver.foreach_batch(fn).start()
    receiver = start_service(
        receiver_argv(
            tracker.address,
            bootstrap=kafka_broker.bootstrap,
            topic=topic,
            group=f"g-{topic}",
            block_store=blocks,
            block_interval_ms=200,
            receiver_id="w",
            extra=["--auth-token-file", str(tmp_path / "victim.token"), "--stream-id", "0"],
        ),
        log=tmp_path / "receiver.log",
    )
    try:
        # The attacks start once the real receiver is registered: they are on a live receiver id (an
        # id not registered yet may be taken by any credential until it leaves or dies).
        with SyncTrackerClient(tracker.address, "driver", auth_token=DRIVER_TOKEN) as admin:
            wait_until(lambda: "w-0" in admin.status()["receivers"], "the receiver to register", 60, [receiver])
        thread.start()
        assert done.wait(400), f"only {seen['records']} records processed"
        assert tracker.proc.poll() is None and receiver.poll() is None
    finally:
        stop_attacks.set()
        if thread.is_alive():
            thread.join(30)
        driver.stop(graceful=True)
        stop_process(receiver)
        stop_process(tracker.proc)
    values = read_values(spark, out)
    assert sorted(values) == list(range(TOTAL)), f"{len(values)} values, {len(set(values))} distinct"
    assert rss["rounds"] > 5, rss
    assert rss["max"] < RSS_BOUND, f"the tracker reached {rss['max'] >> 20} MiB"
