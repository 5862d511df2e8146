"""Time behind with real processes: Apache Kafka, a throttled ``sluice-receiver`` and a
``sluice-tracker`` whose metrics endpoint reports ``sluice_stream_lag_seconds``.

The test plays the driver itself (allocate, complete), so it can read the metric at moments when
no block is unfinished: the backlog then waits only in Kafka, behind the receiver's rate, and only
the receiver's heartbeat can show it.  Once the receiver has taken every record, the rest waits in
queued blocks only, which must show it by their own timestamps; finished, nothing is behind.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from sluice.embedded import create_topic, stop_process
from sluice.tracker.client.tracker_client import TrackerClient
from tests.polling import eventually

from .helpers import scrape
from .test_workers import worker

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

BEHIND_S = 600  # the records' Kafka timestamps are this far in the past
TOTAL, RATE = 3_000, 150  # 20 s of backlog at the receiver's rate
LAG = "sluice_stream_lag_seconds"


async def produce_at(bootstrap: str, topic: str, count: int, timestamp_ms: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(topic, value=b"%d" % i, partition=0, timestamp_ms=timestamp_ms) for i in range(count)
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def test_a_backlog_held_in_kafka_by_the_rate_shows_as_seconds_behind_then_drains(
    kafka_broker, tracker_process, tmp_path: Path
) -> None:
    topic = await create_topic(kafka_broker.bootstrap, 1)
    stamped_ms = int(time.time() * 1000) - BEHIND_S * 1000
    await produce_at(kafka_broker.bootstrap, topic, TOTAL, stamped_ms)
    proc = worker(
        tmp_path,
        tracker_process.address,
        "wl",
        *("--source", "kafka", "--bootstrap-servers", kafka_broker.bootstrap, "--topic", topic),
        *("--group-id", f"g-{topic}", "--max-rate", str(RATE), "--block-interval-ms", "1000"),
    )

    def behind_at_most() -> float:
        """The age of the records now: what the metric may read at most (plus a second of slack)."""
        return time.time() - stamped_ms / 1000 + 1

    processed = 0
    try:
        async with TrackerClient(tracker_process.address, "admin") as driver:

            async def finish_batches() -> bool:
                """Allocate and complete a batch; True when no block is unfinished now."""
                nonlocal processed
                batch_ms = int(time.time() * 1000)
                taken = await driver.allocate_blocks(batch_ms)
                processed += sum(sum(c.num_records) for c in (taken or {}).values())
                await driver.batch_completed({"batch_time_ms": batch_ms})
                status = await driver.status()
                return not status["pending_batches"] and not status["streams"].get(0, {}).get("unallocated_blocks")

            async def behind_with_kafka_only() -> float | None:
                """The metric read while no block is unfinished before and after: Kafka's part alone."""
                if not await finish_batches():
                    return None
                seconds = await asyncio.to_thread(scrape, tracker_process.metrics_port, LAG)
                return seconds if await finish_batches() and processed < TOTAL else None

            seconds = await eventually(behind_with_kafka_only, timeout=30, interval=0.2, message="a backlog in Kafka")
            assert BEHIND_S <= seconds <= behind_at_most(), seconds
            (receiver,) = (await driver.status())["receivers"].values()
            assert receiver["head_ts_ms"] == stamped_ms  # exact: every record has that timestamp

            async def caught_up() -> bool:
                """The receiver took every record; the test has not finished all of them."""
                status = await driver.status()
                (receiver,) = status["receivers"].values()
                queued = status["streams"].get(0, {}).get("unallocated_records", 0)
                return receiver["lag"] == 0 and receiver["head_ts_ms"] is None and processed + queued == TOTAL

            # The rest now waits in queued blocks only, which show it by their oldest record.
            await eventually(caught_up, timeout=60, interval=0.2, message="the receiver caught up with Kafka")
            seconds = await asyncio.to_thread(scrape, tracker_process.metrics_port, LAG)
            assert seconds is not None and BEHIND_S <= seconds <= behind_at_most(), seconds

            async def drained() -> bool:
                await finish_batches()
                return processed == TOTAL and await asyncio.to_thread(scrape, tracker_process.metrics_port, LAG) == 0

            await eventually(drained, timeout=30, interval=0.2, message="every block finished, nothing behind")
    finally:
        assert stop_process(proc) == 0
