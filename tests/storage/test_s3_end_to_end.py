"""Receivers → S3 (moto's server) → tracker → driver, with real processes and the shared SparkSession.

The receivers reach the store through the AWS environment variables (botocore's chain); the driver's
tasks run in PySpark workers started before the test set those variables, so they read blocks with
the storage options the driver ships with the block RDD.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from sluice.embedded import free_port, receiver_argv, start_service, start_tracker, stop_process, wait_until
from sluice.spark_driver import StreamingDriver
from sluice.testing import MotoServer, start_moto
from tests.driver.conftest import driver_tracker
from tests.observe import leftover_processes, metric_value
from tests.receiver.test_kafka_receiver import produce

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def start_receiver(tmp_path: Path, tracker: str, store: str, name: str, env: dict, *args: str):
    return start_service(
        receiver_argv(
            tracker,
            source=None,  # the caller's args name it
            block_store=store,
            receiver_id=name,
            extra=["--heartbeat-interval-ms", "500", *args],
        ),
        env={**env, "SLUICE_TEST_RUN": str(tmp_path)},
        log=tmp_path / f"{name}.log",
    )


def first_word(value: str) -> str:
    """A generator record's ``<receiver>:<seq>``."""
    return value.split(" ", 1)[0]


def kafka_value(record) -> str:
    return record.value.decode()


class Collector:
    """The batch function: collects ``key(record)`` of every record and the batches that had records."""

    def __init__(self, total: int, key=first_word) -> None:
        self.total = total
        self.key = key
        self.values: list[str] = []
        self.batches: list[int] = []
        self.done = threading.Event()

    def __call__(self, batch) -> None:
        values = batch.rdd.map(self.key).collect()
        self.values.extend(values)
        if values:
            self.batches.append(batch.time_ms)
        if len(self.values) >= self.total:
            self.done.set()


@pytest.mark.alone(
    "measures a Spark pipeline's throughput or latency on two cores: other workers beside it would be measured too"
)
def test_exactly_once_over_50000_records_and_cleanup_after_remember_ms(
    spark, s3: MotoServer, tmp_path: Path, monkeypatch
) -> None:
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    bucket, per_receiver, remember_ms = s3.bucket(), 25_000, 2000
    collector = Collector(2 * per_receiver)
    tracker = driver_tracker(tmp_path, remember_ms=remember_ms, block_store=f"s3://{bucket}/blocks")
    # Two-second batches of half-second blocks: eight tasks a batch.  PySpark's cost per task (about
    # 60 ms on two idle cores) made 1 s batches of ten 200 ms blocks last longer than their interval
    # under load, and Spark's PID then holds the rate at its floor.
    driver = StreamingDriver(spark, tracker=tracker.address, batch_interval_ms=2000, initial_rate=40_000)
    driver.foreach_batch(collector).start()
    receivers = [
        start_receiver(
            tmp_path,
            tracker.address,
            f"s3://{bucket}/blocks",
            f"s{i}",
            s3.env,
            "--source",
            "generator",
            "--generator-total",
            str(per_receiver),
            "--max-rate",
            "5000",
            "--block-interval-ms",
            "500",
        )
        for i in range(2)
    ]
    requests_before = len(s3.requests())
    try:
        # 5 s of records at 5,000/s per receiver: blocks fall out of the remember window while streaming.
        wait_until(collector.done.is_set, "50,000 records processed", 120, receivers)
        streamed = s3.requests(requests_before)
        last_batch_ms = collector.batches[-1]
        # Every block goes once the batches after it are remember_ms younger, none sooner.
        wait_until(lambda: not s3.keys(bucket), "every block deleted", remember_ms / 1000 + 30, receivers)
        emptied_ms = time.time() * 1000
    finally:
        driver.stop(graceful=False)
        for proc in receivers:
            stop_process(proc)
        stop_process(tracker.proc)
    assert not leftover_processes(str(tmp_path))
    counts = Counter(collector.values)
    assert len(counts) == 2 * per_receiver and set(counts.values()) == {1}
    assert set(counts) == {f"s{i}-0:{n}" for i in range(2) for n in range(per_receiver)}
    assert emptied_ms - last_batch_ms >= remember_ms
    # While streaming: blocks written by PUT and read by GET, deleted in bulk; the one HEAD per
    # receiver is its start-up check that the bucket exists, never a block's, and the listings are a
    # receiver's start-up look for files an earlier run left (the next is receiver.orphan_grace_ms on):
    # one of the stream's prefix, and one of its parent when the prefix held nothing yet (s3fs then
    # tells an empty prefix from a missing one).  No listing per block.
    listings = [line for line in streamed if line.startswith("GET") and "list-type=2" in line]
    own = [line for line in listings if "prefix=blocks/stream-0/&" in line]
    assert len(own) == len(receivers) and len(listings) <= 2 * len(receivers), listings
    streamed = [line for line in streamed if line not in listings]
    heads = [line for line in streamed if line.startswith("HEAD")]
    assert len(heads) <= len(receivers) and all(line.rstrip("/") == f"HEAD /{bucket}" for line in heads), heads
    methods = Counter(line.split()[0] for line in streamed if f"/{bucket}" in line and not line.startswith("HEAD"))
    assert methods["PUT"] >= 10 and methods["GET"] == methods["PUT"] and methods["POST"] >= 1, methods
    assert set(methods) == {"PUT", "GET", "POST"}, methods
    assert all(line == f"POST /{bucket}?delete" for line in streamed if line.startswith("POST")), streamed


def test_store_outage_mid_run_loses_nothing_and_acknowledges_nothing(
    spark, kafka_broker, tmp_path: Path, monkeypatch
) -> None:
    """moto keeps objects in memory, so a restarted server is empty.  The test is built around that:
    the driver has processed everything stored before the outage when the server is killed, so the
    restart loses only blocks whose records are already in the output (the real store would still
    hold them; the driver deletes them either way).  Then records arrive while the store is down:
    the receivers hold them, retry the writes, acknowledge nothing, and store them once the server
    is back (with the bucket, which an S3 outage does not take away)."""
    moto = start_moto(tmp_path / "moto")
    for name, value in moto.env.items():
        monkeypatch.setenv(name, value)
    bucket, phase, partitions = moto.bucket(), 5000, 2
    topic = kafka_broker.create_topic(partitions)
    asyncio.run(produce(kafka_broker.bootstrap, topic, phase, partitions))
    collector = Collector(2 * phase, kafka_value)
    metrics = free_port()
    tracker = start_tracker(
        tmp_path / "wal", args=["--metrics-port", str(metrics)], block_store=f"s3://{bucket}/blocks"
    )
    driver = StreamingDriver(spark, tracker=tracker.address, batch_interval_ms=1000, initial_rate=20_000)
    driver.foreach_batch(collector).start()
    # One botocore attempt per store call, so the store's own retries (and their log lines) show at once.
    receiver = start_receiver(
        tmp_path,
        tracker.address,
        f"s3://{bucket}/blocks",
        "k",
        {**moto.env, "AWS_MAX_ATTEMPTS": "1"},
        "--source",
        "kafka",
        "--bootstrap-servers",
        kafka_broker.bootstrap,
        "--topic",
        topic,
        "--group-id",
        f"g-{topic}",
    )
    log = tmp_path / "k.log"

    def acknowledged() -> float | None:
        return metric_value(metrics, "sluice_tracker_requests_total", op="add_block")

    def pushes_failed() -> int:
        return log.read_text().count("Error pushing block")

    try:
        wait_until(lambda: len(collector.values) >= phase, "the first records processed", 90, [receiver], log)
        moto.stop(signal.SIGKILL)
        asyncio.run(produce(kafka_broker.bootstrap, topic, phase, partitions, start=phase))
        # The store gives up on a write after its retries; the receiver keeps the block and tries again.
        # Pushes are sequential: once one failed, every earlier block's add_block is done, and none
        # may follow while the store is down.
        wait_until(lambda: pushes_failed() >= 1, "a failed push", 60, [receiver], log)
        before = acknowledged()
        wait_until(lambda: pushes_failed() >= 3, "two more failed pushes", 60, [receiver], log)
        assert acknowledged() == before and len(collector.values) == phase
        text = log.read_text()
        assert "retrying in 0.5 s" in text and "retrying in 1.0 s" in text  # the store's backoff
        failure = next(line for line in text.splitlines() if "failed after 3 attempts" in line)
        assert f"to s3://{bucket}/blocks/stream-0/" in failure and "EndpointConnectionError" in failure
        assert moto.endpoint in failure
        moto.start()
        moto.bucket(bucket)
        wait_until(collector.done.is_set, "every record processed", 90, [receiver], log)
    finally:
        driver.stop(graceful=False)
        stop_process(receiver)
        tracker.stop()
        moto.stop()
    counts = Counter(collector.values)
    assert set(counts.values()) == {1} and sorted(map(int, counts)) == list(range(2 * phase))
    assert not leftover_processes(f"-p\0{moto.port}") and not leftover_processes(str(tmp_path))
