"""``Batch.write_kafka`` in receiver mode: a batch of stored blocks written to Kafka, its re-run
(a restarted driver rebuilds it from the same blocks) leaving each record once, as it came, also
when the driver is SIGKILLed between the commit and the batch's completion."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.embedded import driver_argv, stop_process, wait_until
from sluice.records import Record
from sluice.spark_driver.batch import Batch
from sluice.spark_driver.block_rdd import block_rdd
from sluice.storage.block_store import Block, FileBlockStore
from tests.direct.test_write_kafka import read_records
from tests.driver.apps import marked_records, with_records
from tests.driver.conftest import driver_tracker
from tests.driver.test_end_to_end import produce, start_receivers

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _block(store: FileBlockStore, partition: int, n: int) -> ReceivedBlockInfo:
    records = [
        Record(f"k{i}".encode(), f"{partition}:{i}".encode(), "in", partition, i, 1000 + i, (("h", str(i).encode()),))
        for i in range(n)
    ]
    ranges = (OffsetRange("in", partition, 0, n),)
    location = store.write(Block(0, f"b{partition}", records, ranges))
    return ReceivedBlockInfo(0, f"b{partition}", "r", n, location, ranges)


def test_a_rerun_receiver_batch_leaves_every_record_once_as_it_came(spark, kafka_broker, tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path)
    blocks = [_block(store, p, n) for p, n in ((0, 30), (1, 12))]
    out, app = kafka_broker.create_topic(2), f"t{uuid.uuid4().hex[:8]}"
    outputs = []
    for _ in range(2):  # the first run, then the re-run of the same allocation
        batch = Batch(2000, block_rdd(spark.sparkContext, blocks), spark, num_records=42, blocks=blocks)
        batch.write_kafka(out, bootstrap_servers=kafka_broker.bootstrap, app=app)
        outputs += batch.outputs
    # the page's output state: two tasks committed 42 records, then the re-run found both written
    assert [(o["topic"], o["records"], o["committed"], o["already"]) for o in outputs] == [
        (out, 42, 2, 0),
        (out, 0, 0, 2),
    ]
    records = read_records(kafka_broker.bootstrap, out, 2)
    assert sorted(r.value for r in records) == sorted(
        f"{p}:{i}".encode() for p, n in ((0, 30), (1, 12)) for i in range(n)
    )
    for r in records:
        i = r.value.split(b":")[1]
        assert r.key == b"k" + i and list(r.headers) == [("h", i)]


@pytest.mark.timeout(600)  # two driver JVMs in turn: minutes on two loaded cores
def test_a_driver_killed_after_the_commit_writes_nothing_twice_where_at_least_once_writes_again(
    kafka_broker, tmp_path: Path
) -> None:
    """The window between a batch's commit and its completion at the tracker: the batch function
    writes the same records exactly once and at least once, then holds, and the driver is
    SIGKILLed there.  The restarted driver re-runs the batch: the exactly-once topic keeps each
    record once (each task finds its marker), the at-least-once one gets the killed batch again."""
    total = 3000
    source = kafka_broker.create_topic(partitions=2)
    produce(kafka_broker.bootstrap, source, total)
    exactly, at_least = kafka_broker.create_topic(2), kafka_broker.create_topic(2)
    tracker = driver_tracker(tmp_path)
    marks, log = tmp_path / "marks", tmp_path / "driver.log"
    args = [
        sys.executable,
        *driver_argv(
            tracker.address,
            app="tests.driver.apps:write_to_kafka",
            master="local[1]",
            batch_interval_ms=2000,
            block_store=(tmp_path / "blocks").as_uri(),
            extra=["--initial-rate", "1000", "--resume-rate", "false"],
        ),
    ]
    env = {
        **os.environ,
        "SLUICE_TEST_MARKS": str(marks),
        "SLUICE_TEST_KAFKA": kafka_broker.bootstrap,
        "SLUICE_TEST_EXACTLY_ONCE": exactly,
        "SLUICE_TEST_AT_LEAST_ONCE": at_least,
        "SLUICE_TEST_APP": f"killed-{uuid.uuid4().hex[:8]}",
    }

    def driver(**extra: str) -> subprocess.Popen:
        with log.open("ab") as sink:
            return subprocess.Popen(
                args, env={**env, **extra}, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )

    first = driver(SLUICE_TEST_HOLD_S="300")  # the first batch with records: committed, then held
    procs = [first, *start_receivers(tmp_path, tracker.address, kafka_broker.bootstrap, source, 1, 500, 500)]
    try:
        wait_until(lambda: with_records(marks) > 0, "a batch written", 300, procs, log)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        killed = marked_records(marks)
        assert 0 < killed < total, f"{killed} of {total} records in the killed batch: no re-run tested"
        procs[0] = driver()
        wait_until(lambda: marked_records(marks) >= total, f"{total} records", 300, procs, log)
    finally:
        for proc in procs:
            stop_process(proc, signal.SIGKILL)
        stop_process(tracker.proc)
    assert "re-running" in log.read_text()
    expected = {str(i).encode() for i in range(total)}
    once = Counter(r.value for r in read_records(kafka_broker.bootstrap, exactly, 2))
    assert set(once) == expected and max(once.values()) == 1, f"{sum(once.values()) - len(once)} duplicates"
    again = Counter(r.value for r in read_records(kafka_broker.bootstrap, at_least, 2))
    assert set(again) == expected and sum(again.values()) - len(again) == killed, (killed, again.most_common(2))
