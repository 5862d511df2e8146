"""A transactional topic read with ``read_committed`` over SCRAM by each of Sluice's three readers.

A real transactional producer writes 60 transactions and aborts every tenth; alice reads over the
secured broker's SASL_PLAINTEXT listener with ``isolation_level = read_committed``: (a) a receiver
process and a ``sluice-driver`` process that is SIGKILLed in the middle of a batch and started
again, (b) direct mode, stopped with a batch planned and not run and started again from its
checkpoint, (c) the ``sluice-kafka`` structured source.  Each must give every committed record
exactly once and no aborted one, although each commit or abort marker takes an offset.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sluice.embedded import start_tracker, stop_process, wait_until
from sluice.embedded.kafka import KafkaBroker
from sluice.spark_driver.direct.source import DirectKafkaSource
from sluice.spark_driver.source import SourceContext
from tests.direct.conftest import complete, produce_transactions
from tests.direct.test_exactly_once import read_output
from tests.driver.apps import marked_records
from tests.kafka.conftest import PASSWORD
from tests.kafka.test_kafka_security import receiver, scram, write_config
from tests.structured.test_kafka_source import drain, rows, start

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

TRANSACTIONS, SIZE = 60, 20  # every tenth aborted: 54 committed, 1,080 records
COMMITTED = {f"x{t}-{i}" for t in range(TRANSACTIONS) if (t + 1) % 10 for i in range(SIZE)}


@pytest.fixture(scope="module")
def transactional(secure: KafkaBroker) -> str:
    """The topic, written by a transactional producer (the super user); alice may read it in any group."""
    topic = secure.create_topic(1)
    produce_transactions(secure.bootstrap, topic, TRANSACTIONS, SIZE, abort_every=10)
    secure.allow("alice", ["Read", "Describe"], topic=topic, group="*")
    return topic


def alice(secure: KafkaBroker) -> dict[str, Any]:
    """alice's SCRAM login and read_committed, as aiokafka settings (without the bootstrap servers)."""
    options = secure.client_options("SASL_PLAINTEXT", user="alice")
    del options["bootstrap_servers"]
    return {**options, "isolation_level": "read_committed"}


def assert_committed_once(values: list[str]) -> None:
    twice = [v for v, n in Counter(values).items() if n > 1]
    assert not twice, f"{len(twice)} records twice, e.g. {twice[:3]}"
    aborted = {v for v in values if int(v[1:].split("-")[0]) % 10 == 9}
    assert not aborted, f"aborted records read: {sorted(aborted)[:3]}"
    assert set(values) == COMMITTED, f"missing {sorted(COMMITTED - set(values))[:3]}"


@pytest.mark.timeout(600)  # two driver JVMs in turn: minutes on two loaded cores
def test_receivers_and_a_killed_driver(secure: KafkaBroker, transactional: str, tmp_path: Path) -> None:
    tracker = start_tracker(tmp_path / "wal", args=["--no-fsync"], block_store=(tmp_path / "blocks").as_uri())
    config = write_config(
        tmp_path / "sluice.toml",
        secure.listener("SASL_PLAINTEXT"),
        transactional,
        f"r-{transactional}",
        *scram("alice"),
        f'sasl_plain_password = "{PASSWORD}"',
        'isolation_level = "read_committed"',
    )
    out, marks, log = tmp_path / "out", tmp_path / "marks", tmp_path / "driver.log"
    args = [
        *(sys.executable, "-m", "sluice.spark_driver.cli", "--tracker", tracker.address),
        *("--app", "tests.driver.apps:write_values", "--master", "local[1]", "--batch-interval-ms", "2000"),
        *("--initial-rate", "300", "--resume-rate", "false", "--block-store", (tmp_path / "blocks").as_uri()),
    ]
    env = {**os.environ, "SLUICE_TEST_OUT": str(out), "SLUICE_TEST_MARKS": str(marks)}

    def driver(**extra: str) -> subprocess.Popen:
        with log.open("ab") as sink:
            return subprocess.Popen(
                args, env={**env, **extra}, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )

    first = driver(SLUICE_TEST_HOLD_S="30")  # the first batch with records holds after writing: killed there
    # at 200 records/s the stream lasts three batches: the first one with records cannot hold them all
    procs = [first, receiver(tmp_path, tracker.address, config, "tx", "receiver", "--max-rate", "200")]
    try:
        wait_until(lambda: marked_records(marks) > 0, "a batch written", 300, procs, log)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        assert marked_records(marks) < len(COMMITTED), "the stream was over before the kill: nothing tested"
        procs[0] = driver()
        wait_until(lambda: marked_records(marks) >= len(COMMITTED), "every committed record", 300, procs, log)
    finally:
        for proc in procs:
            stop_process(proc, signal.SIGKILL)
        tracker.stop()
    assert "re-running" in log.read_text()  # the killed batch ran again
    assert_committed_once([row["value"] for row in read_output(out)])


def test_direct_mode_across_a_restart(secure: KafkaBroker, transactional: str, spark, tmp_path: Path) -> None:
    def source() -> DirectKafkaSource:
        made = DirectKafkaSource(
            secure.listener("SASL_PLAINTEXT"),
            transactional,
            group_id=f"d-{transactional}",
            checkpoint_dir=str(tmp_path / "ckpt"),
            client_options=alice(secure),
            max_rate_per_partition=300,
        )
        made.start(SourceContext(spark, 1000))
        return made

    first = source()
    lost = first.create_batch(1000, None)  # planned and checkpointed, never run: the driver dies
    first.stop()
    again = source()
    assert again.recover() == [1000]
    values = [r.value.decode() for r in complete(again, again.rebuild_batch(1000))]
    try:
        for time_ms in range(2000, 100_000, 1000):
            batch = again.create_batch(time_ms, None)
            if batch is None or batch.is_empty:
                break
            values += [r.value.decode() for r in complete(again, batch)]
    finally:
        again.stop()
    assert lost.offset_ranges[0].until_offset < len(COMMITTED)  # more than one batch
    assert_committed_once(values)


def test_the_sluice_kafka_source(secure: KafkaBroker, transactional: str, spark) -> None:
    from sluice.spark_driver.structured import register

    register(spark)
    client = json.dumps(alice(secure))
    name, query = start(
        spark,
        secure.listener("SASL_PLAINTEXT"),
        transactional,
        startingOffsets="earliest",
        maxOffsetsPerTrigger=400,
        kafkaClientOptions=client,
    )
    drain(query)
    assert_committed_once([value for _, _, value in rows(spark, name)])
