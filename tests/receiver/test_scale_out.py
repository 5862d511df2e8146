"""Scale-out: four ``sluice-receiver`` workers feed one stream from eight Kafka partitions, each worker
writing to its own prefix of an S3 store (moto's server); one is killed with SIGKILL mid-stream."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from sluice.embedded import (
    create_topic,
    free_port,
    receiver_argv,
    start_service,
    start_tracker,
    stop_process,
    wait_until,
)
from sluice.testing import MotoServer
from sluice.tracker.client.tracker_client import TrackerClient
from tests.observe import leftover_processes, metric_value
from tests.receiver.helpers import allocate_all, duplicates, records_of
from tests.receiver.test_kafka_receiver import produce

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

WORKERS, PARTITIONS, PER_PARTITION, RATE = 4, 8, 8000, 4000.0


async def status(address: str) -> dict:
    async with TrackerClient(address, "admin") as admin:
        return await admin.status()


async def publish(address: str, rate: float) -> None:
    async with TrackerClient(address, "driver") as driver:
        await driver.publish_rate(0, rate)


def shares(address: str) -> dict[str, float]:
    """The rate each live receiver was given."""
    return {rid: r["rate"] for rid, r in asyncio.run(status(address))["receivers"].items() if r["live"]}


def test_four_workers_split_the_rate_rebalance_after_a_sigkill_and_lose_nothing(
    kafka_broker, s3: MotoServer, tmp_path: Path
) -> None:
    total = PARTITIONS * PER_PARTITION
    topic = asyncio.run(create_topic(kafka_broker.bootstrap, PARTITIONS))
    asyncio.run(produce(kafka_broker.bootstrap, topic, total, PARTITIONS))
    bucket = s3.bucket()
    stores = ",".join(f"s3://{bucket}/w{i}" for i in range(WORKERS))  # each worker writes its own store
    tracker = start_tracker(tmp_path / "wal", args=["--liveness-timeout-ms", "3000"], block_store=stores)
    address = tracker.address
    asyncio.run(publish(address, RATE))  # as a driver would: shared among whoever registers
    config = tmp_path / "sluice.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_broker.bootstrap}"\ntopic = "{topic}"\n'
        f'group_id = "g-{topic}"\n[kafka.client]\nsession_timeout_ms = 6000\n'
        "heartbeat_interval_ms = 1000\n"
    )
    ports = [free_port() for _ in range(WORKERS)]
    workers = [
        start_service(
            receiver_argv(
                address,
                block_store=f"s3://{bucket}/w{i}",
                receiver_id=f"w{i}",
                extra=["--config", str(config), "--heartbeat-interval-ms", "500", "--metrics-port", str(ports[i])],
            ),
            env={**s3.env, "SLUICE_TEST_RUN": str(tmp_path)},
            log=tmp_path / f"w{i}.log",
        )
        for i in range(WORKERS)
    ]
    try:
        # The split: every live receiver gets a quarter, and its limiter runs at that rate.
        wait_until(
            lambda: shares(address) == {f"w{i}-0": RATE / WORKERS for i in range(WORKERS)},
            "four equal shares",
            60,
            workers,
        )
        wait_until(
            lambda: all(metric_value(p, "sluice_receiver_rate_limit") == RATE / WORKERS for p in ports),
            "every limiter at its share",
            30,
            workers,
        )
        # Every worker has acknowledged blocks under its prefix (a first S3 call takes seconds on a busy host).
        wait_until(
            lambda: all((metric_value(p, "sluice_receiver_blocks_pushed_total") or 0) > 0 for p in ports),
            "a block acknowledged from every worker",
            60,
            workers,
        )
        before = [metric_value(p, "sluice_receiver_records_total") for p in ports]
        started = time.monotonic()
        time.sleep(3.0)  # a window of steady ingest, measured on the receivers' own counters
        taken = [metric_value(p, "sluice_receiver_records_total") - b for p, b in zip(ports, before)]
        window = time.monotonic() - started
        # At most the window at the share, plus a second of stored permits and one fetch paid ahead (half
        # a second's worth): four times that share would be far above it.
        assert all(0 < n <= RATE / WORKERS * (window + 2.0) for n in taken), (taken, window)

        workers[0].send_signal(signal.SIGKILL)  # mid-stream: blocks queued, offsets uncommitted
        workers[0].wait(10)
        survivors = {f"w{i}-0": RATE / (WORKERS - 1) for i in range(1, WORKERS)}
        wait_until(lambda: shares(address) == survivors, "the rate split among three", 30, workers[1:])
        blocks = []

        def everything_accepted() -> bool:
            blocks.extend(asyncio.run(allocate_all(address)))
            return sum(b.num_records for b in blocks) >= total

        wait_until(everything_accepted, "every record accepted", 120, workers[1:])
        for proc in workers[1:]:
            assert stop_process(proc) == 0
    finally:
        for proc in workers:
            stop_process(proc, signal.SIGKILL)
        tracker.stop()
    assert not leftover_processes(str(tmp_path))  # the tracker's command line names it, the workers' environment
    for block in blocks:  # each worker wrote under its own prefix
        assert block.location.startswith(f"s3://{bucket}/{block.receiver_id.rsplit('-', 1)[0]}/stream-0/")
    assert {b.receiver_id for b in blocks} == {f"w{i}-0" for i in range(WORKERS)}
    records = records_of(blocks, s3.options)
    assert not duplicates([(r.partition, r.offset) for r in records])
    assert sorted(int(r.value) for r in records) == list(range(total))
    # The survivors took over the killed worker's partitions (Kafka's rebalance): each one it had not
    # read to its end.  One it had finished leaves nothing to take over (a suite run: the killed
    # worker had read the whole of one of its two partitions, the first worker to join reads at the
    # whole rate until the others register).
    reached: dict[int, int] = {}
    for b in blocks:
        if b.receiver_id == "w0-0":
            for r in b.offset_ranges:
                reached[r.partition] = max(reached.get(r.partition, 0), r.until_offset)
    unfinished = {p for p, end in reached.items() if end < PER_PARTITION}
    taken_over = {r.partition for b in blocks if b.receiver_id != "w0-0" for r in b.offset_ranges}
    assert unfinished, f"the killed worker had read all of {sorted(reached)}: no rebalance shown"
    assert unfinished <= taken_over, (reached, sorted(taken_over))
