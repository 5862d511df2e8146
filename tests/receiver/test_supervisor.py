"""ReceiverSupervisor against a real tracker process: push path, rate pushes, restarts, bounded memory."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sluice.receiver.receiver import Receiver
from sluice.receiver.sources.generator import GeneratorReceiver, make_record
from sluice.receiver.sources.socket import SocketReceiver
from sluice.receiver.supervisor import ReceiverSupervisor
from sluice.storage.block_store import open_block_store
from sluice.tracker.client.tracker_client import TrackerClient
from tests.polling import eventually

from .helpers import allocate_all, records_of


def supervisor(
    receiver: Receiver, client: TrackerClient, tmp_path: Path, rid: str = "r-0", **kwargs
) -> ReceiverSupervisor:
    options: dict[str, Any] = dict(
        stream_id=0, receiver_id=rid, block_interval_ms=50, restart_delay_ms=100, heartbeat_interval_ms=200
    )
    options.update(kwargs)
    return ReceiverSupervisor(receiver, client, open_block_store((tmp_path / "blocks").as_uri()), **options)


@pytest.fixture
async def client(tracker_process):
    sups: dict[str, ReceiverSupervisor] = {}
    tracker = TrackerClient(
        tracker_process.address,
        "receiver",
        on_update_rate=lambda s, rid, rate: sups[rid].update_rate(rate) if rid in sups else None,
        on_stop=lambda rid, reason: sups[rid].request_stop(reason) if rid in sups else None,
    )
    tracker.supervisors = sups
    await tracker.start()
    yield tracker
    await tracker.close()


@pytest.mark.slow
async def test_generated_records_reach_the_tracker_in_order_and_once(client, tracker_process, tmp_path):
    sup = supervisor(GeneratorReceiver(total=5_000, batch_size=250), client, tmp_path)
    await sup.start()
    await eventually(lambda: sup.pusher.records_stored == 5_000)
    await sup.stop("test over")
    assert sup.pusher.generator.is_stopped()
    blocks = await allocate_all(tracker_process.address)
    assert sum(b.num_records for b in blocks) == 5_000
    assert records_of(blocks) == [make_record("r-0", i, 3) for i in range(5_000)]
    assert all(b.receiver_id == "r-0" and b.block_id.startswith("input-0-r-0-") for b in blocks)


@pytest.mark.slow
async def test_published_rate_is_applied_at_once_and_capped(client, tracker_process, tmp_path):
    sup = supervisor(GeneratorReceiver(), client, tmp_path, max_rate=5_000)
    client.supervisors["r-0"] = sup
    await sup.start()
    assert sup.limiter.rate == 5_000
    async with TrackerClient(tracker_process.address, "driver") as driver:
        await driver.publish_rate(0, 1_000)
        await eventually(lambda: sup.limiter.rate == 1_000, timeout=5)
        await driver.publish_rate(0, 50_000)
        await eventually(lambda: sup.limiter.rate == 5_000, timeout=5)
    await sup.stop()


class FailingOnce(Receiver):
    def __init__(self) -> None:
        super().__init__()
        self.starts = 0

    async def on_start(self) -> None:
        self.starts += 1
        self.spawn(self._run(self.starts))

    async def _run(self, attempt: int) -> None:
        await self.store_many([f"attempt{attempt}"])
        if attempt == 1:
            raise RuntimeError("source broke")


@pytest.mark.slow
async def test_failed_receiver_is_restarted_after_the_delay_and_error_reported(client, tracker_process, tmp_path):
    receiver = FailingOnce()
    sup = supervisor(receiver, client, tmp_path, restart_delay_ms=300)
    await sup.start()
    await eventually(lambda: receiver.starts == 2 and sup.pusher.records_stored == 2, timeout=10)
    assert sup.metrics.restarts._value.get() >= 1
    # the tracker logged the report (its registry forgets it when the receiver registers again)
    await eventually(lambda: "source broke" in tracker_process.log.read_text(), timeout=5)
    await sup.stop()
    assert sorted(records_of(await allocate_all(tracker_process.address))) == ["attempt1", "attempt2"]


@pytest.mark.slow
async def test_stop_pushed_by_the_tracker_ends_the_receiver(client, tracker_process, tmp_path):
    sup = supervisor(GeneratorReceiver(rate=1_000), client, tmp_path)
    client.supervisors["r-0"] = sup
    await sup.start()
    # a second incarnation of the same receiver id supersedes it: the tracker tells the first to stop
    async with TrackerClient(tracker_process.address, "receiver") as other:
        await other.register_receiver(0, "r-0", "elsewhere")
        await asyncio.wait_for(sup.await_termination(), 10)
    assert sup.pusher.generator.is_stopped()


@pytest.mark.slow
async def test_socket_receiver_stores_lines(client, tracker_process, tmp_path):
    sent = [f"line {i}" for i in range(1_000)]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i in range(0, len(sent), 97):
            writer.write(("\n".join(sent[i : i + 97]) + "\n").encode())
            await writer.drain()
        await reader.read()  # hold the connection until the receiver closes it

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sup = supervisor(SocketReceiver("127.0.0.1", port), client, tmp_path)
    await sup.start()
    await eventually(lambda: sup.pusher.records_stored == len(sent), timeout=10)
    await sup.stop()
    server.close()
    assert records_of(await allocate_all(tracker_process.address)) == sent


@pytest.mark.slow
async def test_memory_stays_bounded_while_the_tracker_stops_acknowledging(client, tracker_process, tmp_path):
    queue_size, max_records = 4, 2_000
    sup = supervisor(
        GeneratorReceiver(batch_size=100),
        client,
        tmp_path,
        block_queue_size=queue_size,
        max_block_records=max_records,
        block_interval_ms=50,
    )
    await sup.start()
    await eventually(lambda: sup.pusher.generator.blocks_pushed >= 3, timeout=10)
    tracker_process.pause()
    try:
        highest = 0
        stored_at: list[int] = []
        for _ in range(40):  # 2 s with the tracker frozen
            await asyncio.sleep(0.05)
            highest = max(highest, sup.pusher.generator.blocks_held)
            stored_at.append(sup.pusher.records_stored)
        assert highest <= queue_size + 2
        assert sup.pusher.generator.buffered_records <= max_records + 100
        # store() waits: the records held stop growing
        assert stored_at[-1] == stored_at[-10]
        pushed_while_frozen = sup.pusher.generator.blocks_pushed
    finally:
        tracker_process.resume()
    await eventually(lambda: sup.pusher.generator.blocks_pushed > pushed_while_frozen + queue_size, timeout=20)
    await sup.stop()
    blocks = await allocate_all(tracker_process.address)
    assert sum(b.num_records for b in blocks) == sup.pusher.records_stored
