"""Records that cannot be decoded, in real processes: broker, receiver, tracker, ``sluice-driver``.

A record whose header key is not UTF-8 goes through the broker and a receiver's block and reaches
the batch function with that key as bytes: it is not a bad record.  A truly undecodable record
(it counts headers it does not have) sits in a block as a receiver stores record batches; it is
written here by hand, since a broker that validates records would refuse it.  Under
``driver.bad_records = fail`` the driver stops naming its topic, partition and offset (and not
the skip-block command); started again under ``dead-letter`` it re-runs the batch without the
record and keeps it in the dead-letter store.  Under ``skip`` (a driver of its own, beside that one)
the record is counted in ``sluice_bad_records_total``.  No block is ever skipped.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange, ReceivedBlockInfo, block_id_prefix
from sluice.embedded import free_port, stop_process, wait_until
from sluice.kafka.record_batches import KafkaBatches
from sluice.storage.block_store import Block, FileBlockStore
from sluice.testing.record_batches import batch, framed, produce_batch, record, record_body
from sluice.tracker.client.sync_client import SyncTrackerClient

from .apps import written_records
from .conftest import driver_tracker, failing_driver
from .test_end_to_end import start_receivers

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).parents[2]
HAND = "hand-built"  # the topic of the blocks written here
UNDECODABLE = framed(record_body(2, b"bad", header_count=5))


def add_poisoned_block(address: str, store: FileBlockStore, base: int) -> str:
    """A block of record batches holding offsets ``base`` to ``base + 3`` of HAND/0, the third
    undecodable; its id."""
    with SyncTrackerClient(address, "receiver") as client:
        client.register_receiver(0, "r-hand", "h")
        block_id = block_id_prefix(0, "r-hand", client.incarnation("r-hand")) + f"at-{base}"
        records = [record(d, b"h-%d" % (base + d)) for d in (0, 1)] + [UNDECODABLE, record(3, b"h-%d" % (base + 3))]
        piece = KafkaBatches(HAND, 0, memoryview(batch(base, records)), base, base + 4, 4)
        ranges = (OffsetRange(HAND, 0, base, base + 4),)
        location = store.write(Block(0, block_id, [piece], ranges))
        client.add_block(ReceivedBlockInfo(0, block_id, "r-hand", 4, location, ranges))
    return block_id


def test_bad_records_fail_naming_them_then_go_to_dead_letters_or_are_skipped(kafka_broker, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path / "blocks")
    dead = FileBlockStore(tmp_path / "dead")
    tracker = driver_tracker(tmp_path)
    topic = kafka_broker.create_topic(partitions=1)
    odd_key = record(1, b"r-1", headers=[(b"\xff\xfe", b"x"), (b"trace", b"t")])
    odd = batch(0, [record(0, b"r-0"), odd_key, record(2, b"r-2")])
    asyncio.run(produce_batch(kafka_broker.bootstrap, topic, 0, odd, 3))
    receivers = start_receivers(tmp_path, tracker.address, kafka_broker.bootstrap, topic, count=1)
    out = tmp_path / "out"
    env = {**os.environ, "SLUICE_TEST_OUT": str(out), "SLUICE_TEST_MARKS": str(tmp_path / "marks")}
    args = failing_driver(tracker.address, "tests.driver.apps:write_records", store.url, 1000)
    running = None
    try:
        first = add_poisoned_block(tracker.address, store, 0)
        failed = subprocess.run(
            [*args, "--bad-records", "fail"], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
        )
        assert failed.returncode == 1, failed.stderr[-3000:]
        assert f"Kafka record {HAND}/0 offset 2 cannot be decoded" in failed.stderr, failed.stderr[-3000:]
        assert "driver.bad_records to skip or dead-letter" in failed.stderr and "skip-block" not in failed.stderr

        log = open(tmp_path / "driver.log", "ab")
        dead_letter = [*args, "--bad-records", "dead-letter", "--dead-letter", dead.url]
        running = subprocess.Popen(dead_letter, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        expected = [f"{HAND} 0 h-0", f"{HAND} 1 h-1", f"{HAND} 3 h-3"]
        expected += [f"{topic} 0 r-0", f"{topic} 1 r-1 bytes:fffe trace", f"{topic} 2 r-2"]
        wait_until(lambda: written_records(out) == sorted(expected), "every good record", 240, [running])
        assert stop_process(running, timeout=120) == 0
        [kept] = dead.read(dead.location_of(0, first)).records
        assert (kept["topic"], kept["partition"], kept["offset"], kept["raw"]) == (HAND, 0, 2, UNDECODABLE)
        with SyncTrackerClient(tracker.address, "admin") as admin:
            assert admin.status()["skipped_blocks"] == []
    finally:
        if running is not None and running.poll() is None:
            stop_process(running)
        for proc in receivers:
            stop_process(proc)
        stop_process(tracker.proc)


def test_under_skip_a_bad_record_is_counted_and_the_rest_of_its_block_written(tmp_path: Path) -> None:
    """Its own driver (the skip needs no failed run before it), so that it runs beside the test above."""
    store = FileBlockStore(tmp_path / "blocks")
    tracker = driver_tracker(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, "SLUICE_TEST_OUT": str(out), "SLUICE_TEST_MARKS": str(tmp_path / "marks")}
    port = free_port()
    skip = failing_driver(tracker.address, "tests.driver.apps:write_records", store.url, 1000)
    skip += ["--bad-records", "skip", "--metrics-port", str(port)]
    log = open(tmp_path / "driver.log", "ab")
    running = subprocess.Popen(skip, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        add_poisoned_block(tracker.address, store, 4)
        expected = [f"{HAND} 4 h-4", f"{HAND} 5 h-5", f"{HAND} 7 h-7"]
        wait_until(lambda: written_records(out) == expected, "the block's good records", 240, [running])
        counted = 'sluice_bad_records_total{policy="skip"} 1.0'
        wait_until(lambda: counted in scrape(port), "the skipped record counted", 60, [running])
        assert stop_process(running, timeout=120) == 0
        with SyncTrackerClient(tracker.address, "admin") as admin:
            assert admin.status()["skipped_blocks"] == []
    finally:
        if running.poll() is None:
            stop_process(running)
        stop_process(tracker.proc)


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""
