"""Least privilege per receiver, against a real tracker process: a receiver credential bound to one
stream (``tracker.receiver_tokens``) attacks another stream's receiver, by raw frames and by the
client, and cannot make it lose a record, stop, or accept a block it did not send."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice import embedded
from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.embedded import TrackerProcess
from sluice.tracker.client.tracker_client import TrackerClient
from tests.tracker.conftest import BLOCKS, RawPeer

VICTIM_TOKEN, ATTACKER_TOKEN, DRIVER_TOKEN = "victim-token-0", "attacker-token-1", "driver-token-2"


def tracker_config(tmp_path: Path, extra: str = "") -> Path:
    """A TOML config: the victim's token serves stream 0, the attacker's stream 1."""
    for name, token in (("victim", VICTIM_TOKEN), ("attacker", ATTACKER_TOKEN), ("driver", DRIVER_TOKEN)):
        (tmp_path / f"{name}.token").write_text(token)
    config = tmp_path / "tracker.toml"
    config.write_text(
        f'[tracker]\ndriver_token_file = "{tmp_path}/driver.token"\n{extra}\n'
        f'[tracker.receiver_tokens]\n"{tmp_path}/victim.token" = [0]\n"{tmp_path}/attacker.token" = [1]\n'
    )
    return config


@pytest.fixture
def tracker(tmp_path: Path) -> Iterator[TrackerProcess]:
    proc = embedded.start_tracker(
        tmp_path / "wal", args=["--config", str(tracker_config(tmp_path))], block_store=BLOCKS
    )
    yield proc
    proc.stop()


def peer(tracker: TrackerProcess, token: str) -> RawPeer:
    p = RawPeer(int(tracker.address.rpartition(":")[2]))
    assert "ok" in p.hello("receiver", token)
    return p


def request(p: RawPeer, op: str, **fields: object) -> dict:
    p.send({"op": op, "id": 1, **fields})
    reply = p.recv()
    assert reply is not None
    return reply


def register(p: RawPeer, stream: int, receiver: str) -> int:
    reply = request(p, "register_receiver", stream_id=stream, receiver_id=receiver, host="h")
    assert "ok" in reply, reply
    return reply["ok"]["incarnation"]


def block(stream: int, receiver: str, incarnation: int, n: int, ranges: tuple = ()) -> dict:
    bid = f"input-{stream}-{receiver}-{incarnation}-{n}"
    location = f"{BLOCKS}/stream-{stream}/{bid}.blk"
    return ReceivedBlockInfo(stream, bid, receiver, 10, location, tuple(OffsetRange(*r) for r in ranges)).to_wire()


def queued(tracker: TrackerProcess, stream: int) -> list[ReceivedBlockInfo]:
    async def run() -> list[ReceivedBlockInfo]:
        async with TrackerClient(tracker.address, "driver", auth_token=DRIVER_TOKEN) as driver:
            return [b for _, b in (await driver.list_blocks(stream, 0)).blocks]

    return asyncio.run(run())


def test_add_block_needs_the_registration_of_the_blocks_receiver_on_this_connection(tracker: TrackerProcess) -> None:
    victim = peer(tracker, VICTIM_TOKEN)
    inc = register(victim, 0, "victim")
    unregistered = peer(tracker, VICTIM_TOKEN)  # the right credential, but no registration of its own
    reply = request(unregistered, "add_block", block=block(0, "victim", inc, 1))
    assert reply["error"]["code"] == "not_registered"
    attacker = peer(tracker, ATTACKER_TOKEN)
    assert request(attacker, "add_block", block=block(0, "victim", inc, 1))["error"]["code"] == "forbidden"
    assert queued(tracker, 0) == []
    assert request(victim, "add_block", block=block(0, "victim", inc, 1))["ok"]["accepted"]


def test_an_absurd_offset_claim_cannot_make_the_real_receivers_blocks_refused(tracker: TrackerProcess) -> None:
    victim, attacker = peer(tracker, VICTIM_TOKEN), peer(tracker, ATTACKER_TOKEN)
    inc = register(victim, 0, "victim")
    atk = register(attacker, 1, "attacker")
    claim = block(0, "victim", inc, 1, (("t", 0, 100, 2**63 - 1),))
    assert request(attacker, "add_block", block=claim)["error"]["code"] == "forbidden"
    # on its own stream the claim only marks its own stream's offsets
    own = block(1, "attacker", atk, 1, (("t", 0, 100, 2**63 - 1),))
    assert request(attacker, "add_block", block=own)["ok"]["accepted"]
    real = block(0, "victim", inc, 2, (("t", 0, 100, 110),))
    assert request(victim, "add_block", block=real)["ok"] == {"accepted": True, "block": None}
    assert [b.block_id for b in queued(tracker, 0)] == [real["block_id"]]


def test_block_ids_of_another_registration_cannot_be_claimed(tracker: TrackerProcess) -> None:
    victim, attacker = peer(tracker, VICTIM_TOKEN), peer(tracker, ATTACKER_TOKEN)
    inc = register(victim, 0, "victim")
    atk = register(attacker, 1, "attacker")
    for n in range(25):  # the victim's next ids, on the attacker's own stream and registration
        stolen = block(0, "victim", inc, n) | {"stream_id": 1, "receiver_id": "attacker"}
        stolen["location"] = f"{BLOCKS}/stream-1/{stolen['block_id']}.blk"
        assert request(attacker, "add_block", block=stolen)["error"]["code"] == "forbidden"
    other_incarnation = block(1, "attacker", atk + 1, 0)
    assert request(attacker, "add_block", block=other_incarnation)["error"]["code"] == "forbidden"
    for n in range(25):
        assert request(victim, "add_block", block=block(0, "victim", inc, n))["ok"]["accepted"]
    assert len(queued(tracker, 0)) == 25 and queued(tracker, 1) == []


def test_which_blocks_the_tracker_holds_is_told_only_to_the_receiver_that_holds_the_id(
    tracker: TrackerProcess,
) -> None:
    """``known_blocks`` (what a restarted receiver asks before deleting a file it left behind) answers
    the holder of the registration, about its own ids only."""
    victim, attacker = peer(tracker, VICTIM_TOKEN), peer(tracker, ATTACKER_TOKEN)
    inc = register(victim, 0, "victim")
    register(attacker, 1, "attacker")
    added = block(0, "victim", inc, 1)
    assert request(victim, "add_block", block=added)["ok"]["accepted"]
    ids = [added["block_id"], f"input-0-victim-{inc}-2"]
    assert request(victim, "known_blocks", stream_id=0, receiver_id="victim", block_ids=ids)["ok"] == {
        "known": [added["block_id"]]
    }
    ask = {"stream_id": 0, "receiver_id": "victim", "block_ids": ids}
    assert request(attacker, "known_blocks", **ask)["error"]["code"] == "forbidden"  # not its stream
    unregistered = peer(tracker, VICTIM_TOKEN)
    assert request(unregistered, "known_blocks", **ask)["error"]["code"] == "not_registered"
    foreign = request(victim, "known_blocks", stream_id=0, receiver_id="victim", block_ids=["input-0-other-1-1"])
    assert foreign["error"]["code"] == "forbidden"
    too_many = request(victim, "known_blocks", **(ask | {"block_ids": ids * 501}))
    assert too_many["error"]["code"] == "invalid" and "at most 1000" in too_many["error"]["message"]


@pytest.mark.slow
def test_another_credential_cannot_take_over_stop_heartbeat_or_deregister_a_live_receiver(
    tracker: TrackerProcess,
) -> None:
    victim = peer(tracker, VICTIM_TOKEN)
    inc = register(victim, 0, "victim")
    attacker = peer(tracker, ATTACKER_TOKEN)
    reply = request(attacker, "register_receiver", stream_id=1, receiver_id="victim", host="h", incarnation=2**63 - 1)
    assert reply["error"]["code"] == "forbidden" and "another credential" in reply["error"]["message"]
    reply = request(attacker, "register_receiver", stream_id=0, receiver_id="victim", host="h")
    assert reply["error"]["code"] == "forbidden"  # not its stream either
    assert request(attacker, "heartbeat", receiver_id="victim")["ok"] == {"known": False}
    assert request(attacker, "deregister_receiver", receiver_id="victim")["error"]["code"] == "forbidden"
    victim.sock.settimeout(0.5)  # no stop was pushed to the victim
    with pytest.raises(TimeoutError):
        victim.recv()
    victim.sock.settimeout(10)
    assert request(victim, "heartbeat", receiver_id="victim")["ok"] == {"known": True}
    assert request(victim, "add_block", block=block(0, "victim", inc, 1))["ok"]["accepted"]


def test_the_tracker_assigns_incarnations_and_a_receiver_sees_only_itself(tracker: TrackerProcess) -> None:
    victim, attacker = peer(tracker, VICTIM_TOKEN), peer(tracker, ATTACKER_TOKEN)
    first = register(victim, 0, "victim")
    register(attacker, 1, "attacker")
    again = request(victim, "register_receiver", stream_id=0, receiver_id="victim", host="h", incarnation=2**63 - 1)
    assert first < again["ok"]["incarnation"] < 2**62  # the peer's choice is not taken
    view = request(attacker, "status")["ok"]
    assert list(view["receivers"]) == ["attacker"] and list(view["streams"]) == [1]


@pytest.mark.slow
def test_a_block_sent_before_a_reconnect_is_retried_under_the_superseded_incarnation(tracker: TrackerProcess) -> None:
    first = peer(tracker, VICTIM_TOKEN)
    old = register(first, 0, "victim")
    first.close()  # the connection drops with a block in flight
    again = peer(tracker, VICTIM_TOKEN)
    new = register(again, 0, "victim")
    assert request(again, "add_block", block=block(0, "victim", old, 1))["ok"]["accepted"]  # the same id: deduplicated
    assert request(again, "add_block", block=block(0, "victim", old, 1))["ok"]["accepted"]
    assert request(again, "add_block", block=block(0, "victim", new, 2))["ok"]["accepted"]
    assert request(again, "add_block", block=block(0, "victim", old - 1, 3))["error"]["code"] == "forbidden"
    assert len(queued(tracker, 0)) == 2


@pytest.mark.slow
def test_a_recorded_block_retried_two_registrations_later_gets_its_first_answer(tracker: TrackerProcess) -> None:
    """The reply to a recorded block is lost in a failover and the receiver registers twice before
    its retry: refused, it would delete the file as unrecorded while a batch still needs it."""
    first = peer(tracker, VICTIM_TOKEN)
    old = register(first, 0, "victim")
    sent = block(0, "victim", old, 1, (("t", 0, 0, 10),))
    assert request(first, "add_block", block=sent)["ok"]["accepted"]  # recorded; say the reply was lost
    first.close()
    again = peer(tracker, VICTIM_TOKEN)
    register(again, 0, "victim")
    register(again, 0, "victim")  # superseded once more: `old` is two registrations back
    assert request(again, "add_block", block=sent)["ok"]["accepted"]
    unrecorded = block(0, "victim", old, 2, (("t", 0, 10, 20),))
    assert request(again, "add_block", block=unrecorded)["error"]["code"] == "forbidden"
    other = peer(tracker, ATTACKER_TOKEN)
    register(other, 1, "victim2")
    stolen = sent | {"stream_id": 1, "receiver_id": "victim2"}
    assert request(other, "add_block", block=stolen)["error"]["code"] == "forbidden"
    assert [b.block_id for b in queued(tracker, 0)] == [sent["block_id"]]


def test_registrations_again_at_the_same_moment_are_one_round(tracker: TrackerProcess) -> None:
    """A reconnect and requests answered not_registered at once re-register once: a second round
    would supersede the first and the blocks formed before both would be refused."""

    async def run() -> bool:
        async with TrackerClient(tracker.address, "receiver", auth_token=VICTIM_TOKEN) as client:
            await client.register_receiver(0, "victim", "h")
            before = client.incarnation("victim")
            await asyncio.gather(*(client._register_again() for _ in range(3)))
            assert client.incarnation("victim") != before
            wire = block(0, "victim", before, 1)
            info = ReceivedBlockInfo(0, wire["block_id"], "victim", 10, wire["location"])
            return (await client.add_block(info)).accepted

    assert asyncio.run(run())


@pytest.mark.slow
def test_a_block_re_sent_to_a_restarted_tracker_keeps_its_id_and_is_deduplicated(tmp_path: Path) -> None:
    """Registrations are not logged: a restarted tracker (or a standby that took over) knows no
    receiver. The client names the incarnation it held when it registers again, so the block whose
    reply was lost is re-sent under its own id and deduplicated, not refused and re-formed."""
    config = ["--config", str(tracker_config(tmp_path))]
    first = embedded.start_tracker(tmp_path / "wal", args=config, block_store=BLOCKS)
    port = int(first.address.rpartition(":")[2])
    wire = {}

    async def run() -> tuple[bool, bool]:
        nonlocal first
        async with TrackerClient(first.address, "receiver", auth_token=VICTIM_TOKEN, request_timeout=30) as client:
            await client.register_receiver(0, "victim", "h")
            wire.update(block(0, "victim", client.incarnation("victim") or 0, 1, (("t", 0, 0, 10),)))
            info = ReceivedBlockInfo.from_wire(wire)
            assert (await client.add_block(info)).accepted  # acknowledged; say the reply was lost
            first.stop()
            first = embedded.start_tracker(tmp_path / "wal", port=port, args=config, block_store=BLOCKS)
            again = await client.add_block(info)  # re-sent under its own id after registering again
            return again.accepted, client.incarnation("victim") != int(wire["block_id"].split("-")[3])

    try:
        accepted, new_incarnation = asyncio.run(run())
    finally:
        first.stop()
    assert new_incarnation and accepted
    restarted = embedded.start_tracker(tmp_path / "wal", port=port, args=config, block_store=BLOCKS)
    try:
        assert [b.block_id for b in queued(restarted, 0)] == [wire["block_id"]]  # once
    finally:
        restarted.stop()


@pytest.mark.slow
def test_after_a_restart_a_receiver_id_stays_bound_to_its_credential_and_the_rate_keeps_its_split(
    tmp_path: Path,
) -> None:
    """Registrations are in the log: before the victim registers again, the attacker cannot take its
    id (before, it won the race and the victim received nothing), and the first receiver back gets
    its share of two, not the whole rate."""
    args = ["--config", str(tracker_config(tmp_path))]
    first = embedded.start_tracker(tmp_path / "wal", args=args, block_store=BLOCKS)
    port = int(first.address.rpartition(":")[2])
    try:
        victim, other = peer(first, VICTIM_TOKEN), peer(first, VICTIM_TOKEN)
        register(victim, 0, "victim")
        register(other, 0, "other")
        driver = RawPeer(port)
        assert "ok" in driver.hello("driver", DRIVER_TOKEN)
        assert "ok" in request(driver, "publish_rate", stream_id=0, rate=100.0)
    finally:
        assert first.stop() == 0
    again = embedded.start_tracker(tmp_path / "wal", port=port, args=args, block_store=BLOCKS)
    try:
        attacker = peer(again, ATTACKER_TOKEN)
        reply = request(attacker, "register_receiver", stream_id=1, receiver_id="victim", host="h")
        assert reply["error"]["code"] == "forbidden", reply
        assert "stream 0" in reply["error"]["message"]
        back = request(peer(again, VICTIM_TOKEN), "register_receiver", stream_id=0, receiver_id="victim", host="h")
        assert back["ok"]["rate"] == 50.0, back
    finally:
        again.stop()
