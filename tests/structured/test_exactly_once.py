"""Exactly once across a SIGKILL of the query's process, for both sources, with real processes.

The query runs in a child process (``tests.structured.apps``) with a checkpointLocation and an
idempotent sink (one directory per batch id, replaced when re-run).  It is killed with SIGKILL once
a few batches are out, mid-stream, and started again on the same checkpoint; every record must be
in the output once, none missing.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sluice.embedded import receiver_argv, start_service, stop_process, wait_until
from sluice.storage.block_store import FileBlockStore
from sluice.tracker.client.sync_client import SyncTrackerClient
from tests.direct.test_exactly_once import batch_dirs, read_output

# Three Spark applications in turn (the query, its restart, a reader): about 70 s alone on two cores,
# up to 300 s beside the slow tier on a machine running at half its speed.  The waits are the
# limits that say which step hung; pytest's bound is above their sum.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]
WAIT_S = 400


def values(out: Path) -> list[str]:
    return [row["value"].strip() for row in read_output(out)]


@dataclass(frozen=True)
class Output:
    """Where the query writes (``tests.structured.apps``' OUT argument), how many batches are out
    and the values written."""

    arg: str
    batches: Callable[[], int]
    values: Callable[[], list[str]]


def files(out: Path) -> Output:
    """The idempotent file sink's directory: a directory per batch."""
    return Output(str(out), lambda: len(batch_dirs(out)), lambda: values(out))


def run_killed_and_restarted(
    tmp_path: Path, fmt: str, options: dict, total: int, procs: list, output: Output | None = None
) -> list[str]:
    """Start the query, SIGKILL it after two batches, start it again; the values once all are out."""
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "query.log"
    out = output or files(tmp_path / "out")
    env = {"PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path]), "PYSPARK_PYTHON": sys.executable}
    args = ["-m", "tests.structured.apps", fmt, json.dumps(options), str(checkpoint), out.arg]
    query = start_service(args, env=env, log=log)
    try:
        wait_until(lambda: out.batches() >= 2, "two batches written", WAIT_S, [query, *procs], log)
        os.killpg(query.pid, signal.SIGKILL)
        query.wait(10)
        assert len(out.values()) < total, "the query finished before it was killed: nothing was tested"
        query = start_service(args, env=env, log=log)
        wait_until(lambda: len(set(out.values())) >= total, f"all {total} records written", WAIT_S, [query], log)
    finally:
        stop_process(query)
    return out.values()


def assert_once(found: list[str], expected: set[str]) -> None:
    twice = [v for v, n in Counter(found).items() if n > 1]
    assert not twice, f"{len(twice)} records written twice, e.g. {twice[:3]}"
    assert set(found) == expected, (
        f"missing {sorted(expected - set(found))[:3]}, unexpected {sorted(set(found) - expected)[:3]}"
    )


def test_sluice_source_exactly_once_across_a_killed_query(tracker, tmp_path: Path) -> None:
    total = 4_000
    receiver = start_service(
        receiver_argv(
            tracker.address,
            source="generator",
            block_store=(tmp_path / "blocks").as_uri(),
            block_interval_ms=100,
            receiver_id="gen",
            extra=["--generator-total", str(total), "--generator-rate", "2000", "--generator-words-per-record", "0"],
        ),
        log=tmp_path / "receiver.log",
    )
    try:
        found = run_killed_and_restarted(
            tmp_path,
            "sluice",
            {"tracker": tracker.address, "records": "value", "maxOffsetsPerTrigger": "1000"},
            total,
            [receiver],
        )
    finally:
        stop_process(receiver)
    tags = {v.split(":")[0] for v in found}
    assert len(tags) == 1, tags
    tag = tags.pop()
    assert_once(found, {f"{tag}:{i}" for i in range(total)})
    # Committed blocks are deleted, whenever the kill landed: every block file left is one the
    # tracker still queues (no orphan).  Spark commits a batch's end when it plans the next batch,
    # and a restart re-runs the last logged batch without committing the one before it, so the
    # last two batches' blocks (at most 2 x maxOffsetsPerTrigger records) may be left.
    store = FileBlockStore(tmp_path / "blocks")
    left = {p.name.removesuffix(".blk"): store.read(p.as_uri()) for p in (tmp_path / "blocks").rglob("*.blk")}
    with SyncTrackerClient(tracker.address, "driver") as client:
        queued = {info.block_id for _, info in client.list_blocks(0, 0).blocks}
    assert set(left) <= queued, f"orphan block files (the tracker dropped them): {sorted(set(left) - queued)[:3]}"
    assert sum(len(b.records) for b in left.values()) <= 2_000


@pytest.mark.kafka
def test_sluice_kafka_source_exactly_once_across_a_killed_query(kafka_broker, tmp_path: Path) -> None:
    from tests.direct.conftest import produce

    partitions, per_partition = 4, 1000
    topic = kafka_broker.create_topic(partitions)
    produce(kafka_broker.bootstrap, topic, {p: per_partition for p in range(partitions)})
    options = {
        "kafka.bootstrap.servers": kafka_broker.bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "1000",
    }
    found = run_killed_and_restarted(tmp_path, "sluice-kafka", options, partitions * per_partition, [])
    assert_once(found, {f"v-{p}-{i}" for p in range(partitions) for i in range(per_partition)})


@pytest.mark.kafka
def test_sluice_kafka_sink_exactly_once_across_a_killed_query(kafka_broker, tmp_path: Path) -> None:
    """The same, into Kafka through the ``sluice-kafka`` sink: a read_committed reader sees each record once."""
    from tests.direct.conftest import produce
    from tests.direct.test_write_kafka import read_committed

    partitions, per_partition, per_batch = 4, 1000, 1000
    topic, out = kafka_broker.create_topic(partitions), kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {p: per_partition for p in range(partitions)})
    options = {
        "kafka.bootstrap.servers": kafka_broker.bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": str(per_batch),
    }

    def written() -> list[str]:
        return [v.decode() for v in read_committed(kafka_broker.bootstrap, out, 2)]

    output = Output(f"sluice-kafka:{out}", lambda: len(written()) // per_batch, written)
    found = run_killed_and_restarted(tmp_path, "sluice-kafka", options, partitions * per_partition, [], output)
    assert_once(found, {f"v-{p}-{i}" for p in range(partitions) for i in range(per_partition)})
