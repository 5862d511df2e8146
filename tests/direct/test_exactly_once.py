"""40,000 records, the driver killed (SIGKILL) mid-stream and restarted: each record once in the sink.

The driver runs as ``python -m spark_driver.cli --source direct-kafka`` (``sluice-driver``) in its own
process so it can really be killed; its batch function writes each batch with the idempotent
``Batch.write_json`` (one directory per batch time, replaced when a batch is re-run).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

from sluice.embedded import driver_argv, start_service, stop_process, wait_until
from sluice.spark_driver.direct.checkpoint import checkpoint_path, load
from tests.direct.conftest import produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = """
import os

def process(batch):
    batch.write_json(os.environ["SLUICE_TEST_OUT"])
"""

PARTITIONS = 4
# At 1,500 records a partition a second and 1 s batches a batch takes 6,000: the kill after three
# batches leaves the restart 22,000 or more, four batches' worth (more records only took longer).
TOTAL = 40_000


def batch_dirs(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("batch_time=*") if p.is_dir()) if out.exists() else []


def read_output(out: Path) -> list[dict]:
    rows = []
    for directory in batch_dirs(out):
        for part in sorted(directory.glob("part-*")):
            with open(part, encoding="utf-8") as fh:
                rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


@pytest.mark.timeout(900)
def test_killed_driver_resumes_with_no_gap_and_no_duplicate(kafka_broker, tmp_path: Path) -> None:
    topic = kafka_broker.create_topic(PARTITIONS)
    produce(kafka_broker.bootstrap, topic, {p: TOTAL // PARTITIONS for p in range(PARTITIONS)})
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "direct_app.py").write_text(APP)
    out, ckpt_dir = tmp_path / "out", tmp_path / "ckpt"
    env = {
        "SLUICE_TEST_OUT": str(out),
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "app"), os.getcwd()]),
        "PYSPARK_PYTHON": sys.executable,
        "SLUICE_LOG_LEVEL": "INFO",
    }
    args = driver_argv(
        source="direct-kafka",
        app="direct_app:process",
        master="local[2]",
        batch_interval_ms=1000,
        extra=[
            "--checkpoint-dir",
            str(ckpt_dir),
            "--bootstrap-servers",
            kafka_broker.bootstrap,
            "--topic",
            topic,
            "--group-id",
            f"g-{topic}",
            "--kafka-max-rate-per-partition",
            "1500",
            "--backpressure-enabled",
            "false",
        ],
    )
    log = tmp_path / "driver.log"

    def checkpoint():
        return load(checkpoint_path(ckpt_dir))

    driver = start_service(args, env=env, log=log)
    try:
        wait_until(lambda: len(batch_dirs(out)) >= 3, "three batches written", 300, [driver], log)
        os.killpg(driver.pid, signal.SIGKILL)  # mid-stream, most likely mid-batch
        driver.wait(10)
        first_run = checkpoint()
        assert first_run is not None and sum(first_run.committed.values()) < TOTAL  # work was left

        driver = start_service(args, env=env, log=log)

        def drained() -> bool:
            state = checkpoint()
            return (
                state is not None
                and not state.pending
                and sum(state.next_offsets.values()) == TOTAL
                and sum(state.committed.values()) == TOTAL
            )

        wait_until(drained, "all records processed after the restart", 400, [driver], log)
    finally:
        code = stop_process(driver)
    assert code in (0, -signal.SIGTERM), log.read_text()[-3000:]

    rows = read_output(out)
    seen = Counter((row["partition"], row["offset"]) for row in rows)
    duplicates = [k for k, n in seen.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} records written twice, e.g. {duplicates[:5]}"
    assert len(seen) == TOTAL
    assert {(p, o) for p in range(PARTITIONS) for o in range(TOTAL // PARTITIONS)} == set(seen)
    assert all(row["value"] == f"v-{row['partition']}-{row['offset']}" for row in rows)
