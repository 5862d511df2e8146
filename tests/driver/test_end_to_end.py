"""End to end with real processes: tansu broker, sluice-tracker, two sluice-receiver workers, the driver.

100,000 uniquely numbered records go through Kafka, the receivers, the block store and the tracker
into batches whose values the user's function writes with ``write_json``; every number must come
out exactly once, also when the driver is killed (SIGKILL) in the middle of a batch and restarted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from sluice.embedded import driver_argv, receiver_argv, start_service, stop_process, wait_until
from sluice.spark_driver import StreamingDriver
from tests.driver.apps import marked_records, with_records
from tests.driver.conftest import driver_tracker

pytestmark = [
    pytest.mark.spark,
    pytest.mark.kafka,
    pytest.mark.slow,
    pytest.mark.alone(
        "measures a Spark pipeline's throughput or latency on two cores: other workers beside it would be measured too"
    ),
]

TOTAL = 100_000


def produce(bootstrap: str, topic: str, total: int = TOTAL) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=256 * 1024)
        await producer.start()
        try:
            futures = [await producer.send(topic, str(i).encode()) for i in range(total)]
            await producer.flush()
            for fut in futures:
                await fut
        finally:
            await producer.stop()

    asyncio.run(run())


def start_receivers(
    tmp_path: Path,
    tracker: str,
    bootstrap: str,
    topic: str,
    count: int = 2,
    max_rate: float = 0,
    block_interval_ms: int = 200,
) -> list:
    procs = []
    for i in range(count):
        procs.append(
            start_service(
                receiver_argv(
                    tracker,
                    bootstrap=bootstrap,
                    topic=topic,
                    group=f"g-{topic}",
                    block_store=(tmp_path / "blocks").as_uri(),
                    block_interval_ms=block_interval_ms,
                    receiver_id=f"w{i}",
                    extra=["--max-rate", str(max_rate)],
                ),
                log=tmp_path / f"receiver-{i}.log",
            )
        )
    return procs


def read_values(spark, out: Path) -> list[int]:
    return [int(r.value) for r in spark.read.schema("value string").json(str(out)).collect()]


def assert_exactly_once(values: list[int]) -> None:
    assert len(values) == TOTAL, f"{len(values)} values written, {len(set(values))} distinct"
    assert set(values) == set(range(TOTAL))


def test_every_record_exactly_once(spark, kafka_broker, tmp_path: Path) -> None:
    topic = kafka_broker.create_topic(partitions=4)
    produce(kafka_broker.bootstrap, topic)
    tracker = driver_tracker(tmp_path)
    out = tmp_path / "out"
    seen = {"records": 0}
    done = threading.Event()

    def fn(batch) -> None:
        batch.write_json(str(out))
        seen["records"] += batch.num_records
        if seen["records"] >= TOTAL:
            done.set()

    # two receivers' 200 ms blocks are ten PySpark tasks a batch, which under load outlast a 1 s
    # batch and hold Spark's PID at its floor; two partitions a batch keep the batch inside its interval
    driver = StreamingDriver(
        spark, tracker=tracker.address, batch_interval_ms=1000, initial_rate=20_000, max_batch_partitions=2
    )
    driver.foreach_batch(fn).start()
    # Receivers after the driver: they register and get the initial rate's share at once.
    receivers = start_receivers(tmp_path, tracker.address, kafka_broker.bootstrap, topic)
    try:
        assert done.wait(240), f"only {seen['records']} records processed"
    finally:
        driver.stop(graceful=True)
        for proc in receivers:
            stop_process(proc)
        stop_process(tracker.proc)
    assert_exactly_once(read_values(spark, out))


def test_exactly_once_when_the_driver_is_killed_mid_batch(spark, kafka_broker, tmp_path: Path) -> None:
    topic = kafka_broker.create_topic(partitions=4)
    produce(kafka_broker.bootstrap, topic)
    tracker = driver_tracker(tmp_path)
    receivers: list = []
    out, marks = tmp_path / "out", tmp_path / "marks"
    args = [
        sys.executable,
        *driver_argv(
            tracker.address,
            app="tests.driver.apps:write_values",
            master="local[2]",
            # with one-second blocks: four tasks a batch (ten took Spark over a second on two loaded cores)
            batch_interval_ms=2000,
            block_store=(tmp_path / "blocks").as_uri(),
            # the rate the first driver published under load is not resumed: Spark's PID may stay near a
            # floor whose batches cost Spark's fixed overhead, and this test is about exactly once, not that
            extra=["--initial-rate", "10000", "--resume-rate", "false"],
        ),
    ]
    env = {**os.environ, "SLUICE_TEST_OUT": str(out), "SLUICE_TEST_MARKS": str(marks)}
    log = open(tmp_path / "driver.log", "ab")
    first = subprocess.Popen(
        args,
        env={**env, "SLUICE_TEST_HOLD_S": "3", "SLUICE_TEST_HOLD_FROM": "3"},  # the third is killed held
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=Path(__file__).parents[2],
        start_new_session=True,
    )
    second = None
    try:
        wait_until(
            lambda: "streaming driver started" in (tmp_path / "driver.log").read_text(),
            "the driver to start",
            120,
            [first],
            tmp_path / "driver.log",
        )
        receivers = start_receivers(
            tmp_path, tracker.address, kafka_broker.bootstrap, topic, max_rate=5000, block_interval_ms=1000
        )
        # Wait for the third batch with records to have written its output: it now holds for 3 s
        # before reporting completion, and is killed right there.
        wait_until(
            lambda: with_records(marks) >= 3,
            "three batches with records",
            180,
            [first, *receivers],
            tmp_path / "driver.log",
        )
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        second = subprocess.Popen(
            args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2], start_new_session=True
        )
        wait_until(
            lambda: marked_records(marks) >= TOTAL,
            f"{TOTAL} records",
            240,
            [second, *receivers],
            tmp_path / "driver.log",
        )
        assert stop_process(second, timeout=120) == 0
        # the boundary that passed while no driver ran was created at once, not an interval later
        assert "its boundary passed while no driver ran" in (tmp_path / "driver.log").read_text()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for proc in receivers:
            stop_process(proc)
        stop_process(tracker.proc)
        log.close()
    assert "re-running" in (tmp_path / "driver.log").read_text()  # the killed batch ran again
    assert_exactly_once(read_values(spark, out))
