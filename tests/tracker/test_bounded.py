"""The tracker's state is bounded by stated limits (``tracker.max_*``), with backpressure instead of
collapse: a full stream queue answers ``busy`` and the receiver waits, dropping nothing."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice import embedded
from sluice.block_info import ReceivedBlockInfo
from sluice.clock import ManualClock
from sluice.embedded import TrackerProcess
from sluice.receiver.sources.generator import GeneratorReceiver, make_record
from sluice.receiver.supervisor import ReceiverSupervisor
from sluice.storage.block_store import open_block_store
from sluice.tracker.client.tracker_client import TrackerClient
from sluice.tracker.server.service import TrackerService
from sluice.tracker.server.status import MAX_LISTED
from sluice.tracker.wire.messages import StatusReply
from tests.polling import eventually
from tests.receiver.helpers import records_of
from tests.tracker.conftest import BLOCKS, RawPeer, make_block


@pytest.fixture
def small_tracker(tmp_path: Path) -> Iterator[TrackerProcess]:
    args = ["--max-queued-blocks", "2", "--max-ranges-per-block", "100", "--max-receivers", "3"]
    proc = embedded.start_tracker(tmp_path / "wal", args=args, block_store=f"{(tmp_path / 'blocks').as_uri()},{BLOCKS}")
    yield proc
    proc.stop()


@pytest.mark.slow
async def test_a_full_queue_answers_busy_and_the_receiver_waits_dropping_nothing(
    small_tracker: TrackerProcess, tmp_path: Path
) -> None:
    total = 3_000
    async with TrackerClient(small_tracker.address, "receiver") as client:
        sup = ReceiverSupervisor(
            GeneratorReceiver(total=total, batch_size=100),
            client,
            open_block_store((tmp_path / "blocks").as_uri()),
            stream_id=0,
            receiver_id="r-0",
            block_interval_ms=20,
            block_queue_size=2,
            max_block_records=100,
        )
        await sup.start()
        async with TrackerClient(small_tracker.address, "driver") as driver:

            async def queued() -> int:
                return len((await driver.list_blocks(0, 0)).blocks)

            # the tracker holds its bound, the pusher waits on a busy add_block, the source is held
            async def held() -> bool:
                generator = sup.pusher.generator
                return await queued() == 2 and generator.blocks_held >= 2 and generator.queue_depth >= 2

            await eventually(held, message="the receiver's block queue fills while the tracker answers busy")
            assert sup.pusher.records_stored <= 7 * 100 < total  # held: not fetched, not buffered
            allocated: list[ReceivedBlockInfo] = []
            batch = int(time.time() * 1000)

            async def drain() -> bool:
                nonlocal batch
                batch += 1
                columns = await driver.allocate_blocks(batch)
                allocated.extend(b for blocks in (columns or {}).values() for b in blocks)
                return sum(b.num_records for b in allocated) == total

            await eventually(drain, message="every record allocated")
        await sup.stop("test over")
    assert records_of(allocated) == [make_record("r-0", i, 3) for i in range(total)]  # each once, in order


@pytest.mark.slow
def test_ranges_per_block_and_receivers_are_bounded(small_tracker: TrackerProcess) -> None:
    peer = RawPeer(int(small_tracker.address.rpartition(":")[2]))
    assert "ok" in peer.hello("receiver")
    for i in range(3):
        peer.send({"op": "register_receiver", "id": i, "stream_id": 0, "receiver_id": f"r{i}", "host": "h"})
        assert "ok" in peer.recv()
    peer.send({"op": "register_receiver", "id": 9, "stream_id": 0, "receiver_id": "r3", "host": "h"})
    reply = peer.recv()
    assert reply["error"]["code"] == "limit" and "tracker.max_receivers = 3" in reply["error"]["message"]
    peer.send({"op": "register_receiver", "id": 10, "stream_id": 0, "receiver_id": "r0", "host": "h"})
    incarnation = peer.recv()["ok"]["incarnation"]  # a known id registers again
    bid = f"input-0-r0-{incarnation}-1"
    wire = ReceivedBlockInfo(0, bid, "r0", 10, f"{BLOCKS}/stream-0/{bid}.blk").to_wire()
    wire["offset_ranges"] = [["t", p, 0, 10] for p in range(101)]
    peer.send({"op": "add_block", "id": 11, "block": wire})
    reply = peer.recv()
    assert reply["error"]["code"] == "limit" and "tracker.max_ranges_per_block = 100" in reply["error"]["message"]
    wire["offset_ranges"] = [["t", p, 0, 10] for p in range(60_000)]  # refused while decoding, never built
    peer.send({"op": "add_block", "id": 13, "block": wire})
    assert peer.recv()["error"]["code"] == "bad_frame"
    wire["offset_ranges"] = wire["offset_ranges"][:100]
    peer.send({"op": "add_block", "id": 12, "block": wire})
    assert peer.recv()["ok"]["accepted"]


def test_an_idle_streams_offset_marks_outlive_its_queue_within_a_bound() -> None:
    """A stream forgotten while idle keeps its marks: its receiver may come back and re-read offsets
    whose Kafka commit failed after the acknowledgement, and those must not be queued twice.  Only
    past ``max_streams`` idle streams do the longest-idle one's marks go."""
    clock = ManualClock(1_000_000)
    service = TrackerService(clock=clock, remember_ms=1_000, max_streams=2)

    def idle(stream: int) -> None:
        service.op_register_receiver({"stream_id": stream, "receiver_id": f"r{stream}", "host": "h"}, None)
        ranges = tuple(("t", p, 0, 10) for p in range(50))
        service.op_add_block({"block": make_block(f"b{stream}", stream=stream, ranges=ranges)}, None)
        service.op_deregister_receiver({"receiver_id": f"r{stream}"}, None)
        service.op_allocate_blocks({"batch_time_ms": int(clock.now_ms())}, None)
        service.check_liveness()
        clock.advance(1_001)
        service.check_liveness()
        assert stream not in service.status()["streams"]  # forgotten: queue, labels, registration

    idle(5)
    assert len(service.snapshot()["tracker"]["high"]) == 50  # ... but not its marks
    service.op_register_receiver({"stream_id": 5, "receiver_id": "r5", "host": "h"}, None)
    reread = make_block("b5-again", stream=5, ranges=(("t", 0, 5, 15),))
    accepted = service.op_add_block({"block": reread}, None)[0]
    assert accepted["accepted"] and accepted["block"]["offset_ranges"] == [["t", 0, 10, 15]]  # trimmed
    service.op_deregister_receiver({"receiver_id": "r5"}, None)
    service.op_allocate_blocks({"batch_time_ms": int(clock.now_ms())}, None)
    service.check_liveness()
    clock.advance(1_001)
    service.check_liveness()
    idle(6)
    idle(7)  # a third idle stream: the longest idle (5) drops its marks
    streams = {s for s, *_ in service.snapshot()["tracker"]["high"]}
    assert streams == {6, 7}


def registered_and_status(n: int) -> tuple[float, StatusReply]:
    """Seconds to register ``n`` receivers, one stream each, and answer one status; and the status."""
    service = TrackerService(clock=ManualClock(), max_streams=n, max_receivers=n)
    started = time.perf_counter()
    for i in range(n):  # one stream each: a scan of every receiver per registration or per stream is n**2
        service.op_register_receiver({"stream_id": i, "receiver_id": f"r{i}", "host": "h" * 200}, None)
    for i in range(n):
        service.registry.report_error(f"r{i}", "e" * 2000)
    status, _ = service.op_status({}, None)
    return time.perf_counter() - started, status


def test_status_and_registration_cost_grows_linearly_and_the_reply_is_cut() -> None:
    n = 8_000
    gc.disable()  # a collection inside one run and not the other is noise of the size measured
    try:  # best of three each: a noisy machine only ever adds time
        small = min(registered_and_status(n // 8)[0] for _ in range(3))
        elapsed = min(registered_and_status(n)[0] for _ in range(3))
    finally:
        gc.enable()
    _, status = registered_and_status(n)
    assert elapsed < 24 * small, (elapsed, small)  # linear: about 8 times; n**2: about 64 times
    assert len(status["receivers"]) == MAX_LISTED and status["receiver_count"] == n
    assert len(status["streams"]) == MAX_LISTED and status["stream_count"] == n
    assert all(len(r["last_error"]) <= 500 for r in status["receivers"].values())
