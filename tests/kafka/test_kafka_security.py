"""Receivers and direct mode against Apache Kafka with SCRAM logins and the StandardAuthorizer.

Real ``sluice-receiver`` processes and a real ``sluice-tracker``: a password read from a file logs
in and shows up nowhere (the receiver's log at DEBUG, the tracker's log and status); a principal
missing an ACL stops the receiver at once with one line naming the resource and the operation;
static members restart without moving the other members' partitions; partitions added to a topic
while it is read are read too.  The broker's PLAINTEXT listener is the harness's super user: topics
are made, records produced and ACLs granted through it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from sluice.block_info import OffsetRange
from sluice.embedded import TrackerProcess, create_topic, receiver_argv, start_service, start_tracker, stop_process
from sluice.kafka.offsets_client import KafkaOffsets, KafkaOffsetsRefused
from sluice.kafka.topics import TopicSelection
from sluice.spark_driver.direct.reader import read_range
from sluice.tracker.client.tracker_client import TrackerClient
from tests.kafka.conftest import PASSWORD, USERS
from tests.polling import eventually
from tests.receiver.helpers import allocate_all, records_of
from tests.receiver.test_kafka_receiver import produce

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


@pytest.fixture
def tracker(tmp_path: Path) -> Iterator[TrackerProcess]:
    started = start_tracker(
        tmp_path / "wal", args=["--liveness-timeout-ms", "60000"], block_store=(tmp_path / "blocks").as_uri()
    )
    yield started
    started.stop()


def receiver(tmp_path: Path, tracker: str, config: Path, receiver_id: str, log: str, *extra: str) -> subprocess.Popen:
    """A ``sluice-receiver`` process of one Kafka receiver, ``receiver_id`` its id prefix; ``extra``:
    more of its options."""
    return start_service(
        receiver_argv(
            tracker,
            block_store=(tmp_path / "blocks").as_uri(),
            block_interval_ms=100,
            receiver_id=receiver_id,
            extra=["--config", str(config), "--restart-delay-ms", "200", "--heartbeat-interval-ms", "500", *extra],
        ),
        log=tmp_path / f"{log}.log",
    )


def write_config(path: Path, bootstrap: str, topic: str, group: str, *client: str, kafka: str = "") -> Path:
    lines = [
        "[log]",
        'level = "DEBUG"',
        "[kafka]",
        f'bootstrap_servers = "{bootstrap}"',
        f'topic = "{topic}"',
        f'group_id = "{group}"',
        kafka,
        "[kafka.client]",
        *client,
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def scram(user: str) -> tuple[str, ...]:
    return (
        'security_protocol = "SASL_PLAINTEXT"',
        'sasl_mechanism = "SCRAM-SHA-512"',
        f'sasl_plain_username = "{user}"',
    )


async def accepted(address: str) -> int:
    async with TrackerClient(address, "admin") as admin:
        status = await admin.status()
    return sum(s["unallocated_records"] for s in status["streams"].values())


async def test_a_password_from_a_file_logs_in_and_is_shown_nowhere(secure, tracker, tmp_path) -> None:
    topic = await create_topic(secure.bootstrap, 2)
    group = f"g-{topic}"
    await produce(secure.bootstrap, topic, 500, 2)
    secure.allow("alice", ["Read", "Describe"], topic=topic, group=group)
    secret = tmp_path / "kafka-password"
    secret.write_text(PASSWORD + "\n")
    config = write_config(
        tmp_path / "sluice.toml",
        secure.listener("SASL_PLAINTEXT"),
        topic,
        group,
        *scram("alice"),
        f'sasl_plain_password_file = "{secret}"',
    )
    proc = receiver(tmp_path, tracker.address, config, "alice-r", "alice")
    try:
        await eventually(lambda: _at_least(tracker.address, 500), timeout=60, interval=0.2, message="500 records")
        async with TrackerClient(tracker.address, "admin") as admin:
            status = await admin.status()
        assert stop_process(proc) == 0
    finally:
        stop_process(proc, signal.SIGKILL)
    log = (tmp_path / "alice.log").read_text()
    assert PASSWORD not in log
    assert "sasl_plain_password_file" in log  # the client settings were logged, by the file's name
    assert PASSWORD not in json.dumps(status, default=str)
    assert PASSWORD not in tracker.log.read_text()


async def _at_least(address: str, count: int) -> bool:
    return await accepted(address) >= count


@pytest.mark.parametrize(
    ("granted", "names", "operation"),
    [
        ({"topic": ["Read", "Describe"]}, "group", "READ"),  # the topic, not the group
        ({"topic": ["Describe"], "group": ["Read"]}, "topic", "READ"),  # metadata, but no fetches
        ({"group": ["Read"]}, "topic", "DESCRIBE"),  # not even the topic's metadata
    ],
)
async def test_a_missing_acl_stops_the_receiver_at_once_in_one_line(
    secure, tracker, tmp_path, granted, names, operation
) -> None:
    topic = await create_topic(secure.bootstrap, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    await produce(secure.bootstrap, topic, 10, 1)
    for kind, operations in granted.items():
        secure.allow("bob", operations, **{kind: topic if kind == "topic" else group})
    config = write_config(
        tmp_path / "sluice.toml",
        secure.listener("SASL_PLAINTEXT"),
        topic,
        group,
        *scram("bob"),
        f'sasl_plain_password = "{USERS["bob"]}"',
    )
    began = time.monotonic()
    proc = receiver(tmp_path, tracker.address, config, "bob-r", "bob")
    try:
        code = proc.wait(timeout=10)
    finally:
        stop_process(proc, signal.SIGKILL)
    assert code == 2 and time.monotonic() - began < 10
    log = (tmp_path / "bob.log").read_text()
    resource = group if names == "group" else topic
    refusals = [line for line in log.splitlines() if "ERROR" in line and "authorizer refused" in line]
    assert len(refusals) == 1, log
    assert f"{operation} on {names} '{resource}' to principal User:bob" in refusals[0]
    assert "Traceback" not in log and "restarting receiver" not in log


def test_direct_mode_without_describe_on_its_topic_stops_the_driver_at_once_in_one_line(secure, tmp_path) -> None:
    """Kafka leaves a topic the principal may not DESCRIBE out of its listing of every topic, as if it
    did not exist: asked for by name, it says it is refused, and the driver stops before Spark starts."""
    topic = secure.create_topic(1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    secure.allow("bob", ["Read"], group=group)
    config = write_config(
        tmp_path / "sluice.toml",
        secure.listener("SASL_PLAINTEXT"),
        topic,
        group,
        *scram("bob"),
        f'sasl_plain_password = "{USERS["bob"]}"',
    )
    driver = [sys.executable, "-m", "sluice.spark_driver.cli", "--config", str(config), "--source", "direct-kafka"]
    began = time.monotonic()
    done = subprocess.run(
        [*driver, "--app", "tests.driver.apps:write_values", "--checkpoint-dir", str(tmp_path / "ckpt")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and time.monotonic() - began < 10, done.stderr
    refusals = [line for line in done.stderr.splitlines() if "authorizer refused" in line]
    assert len(refusals) == 1, done.stderr
    assert f"DESCRIBE on topic '{topic}' to principal User:bob" in refusals[0]
    assert "Traceback" not in done.stderr and "do not exist" not in done.stderr


async def test_direct_mode_without_read_on_its_group_fails_once_naming_it(secure, caplog) -> None:
    topic = await create_topic(secure.bootstrap, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    secure.allow("bob", ["Read", "Describe"], topic=topic)
    options = secure.client_options("SASL_PLAINTEXT", user="bob")
    kafka = KafkaOffsets(
        options.pop("bootstrap_servers"), [topic], group, client_options=options, max_retries=5, retry_backoff_ms=1000
    )
    caplog.set_level(logging.WARNING, "sluice.kafka.offsets_client")
    began = time.monotonic()
    try:
        kafka.start()
        with pytest.raises(KafkaOffsetsRefused, match=f"READ on group '{group}'") as refused:
            kafka.committed([(topic, 0)])
    finally:
        kafka.close()
    assert not refused.value.retriable
    assert time.monotonic() - began < 10  # five retries with backoff would take 31 s
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]


def assigned_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if " assigned [" in line]


async def test_a_static_member_restarts_without_revoking_the_others_partitions(secure, tracker, tmp_path) -> None:
    topic = await create_topic(secure.bootstrap, 4)
    group = f"g-{topic}"
    config = write_config(
        tmp_path / "sluice.toml",
        secure.bootstrap,
        topic,
        group,
        "session_timeout_ms = 10000",
        "heartbeat_interval_ms = 500",
        kafka="static_membership = true",
    )
    a = receiver(tmp_path, tracker.address, config, "static-a", "a")
    b = receiver(tmp_path, tracker.address, config, "static-b", "b1")
    procs = [a, b]
    try:

        def settled() -> bool:  # both members hold two partitions each
            lines = [assigned_lines(tmp_path / f"{name}.log") for name in ("a", "b1")]
            return all(ls and ls[-1].count("(") == 2 for ls in lines)

        await eventually(settled, timeout=60, interval=0.2, message="two members of two partitions each")
        mark = len((tmp_path / "a.log").read_text())
        assert stop_process(b) == 0
        b2 = receiver(tmp_path, tracker.address, config, "static-b", "b2")
        procs.append(b2)
        await eventually(
            lambda: any(line.count("(") == 2 for line in assigned_lines(tmp_path / "b2.log")),
            timeout=30,
            interval=0.2,
            message="the restarted member holding its two partitions again",
        )
        since = (tmp_path / "a.log").read_text()[mark:]
    finally:
        for proc in procs:
            stop_process(proc, signal.SIGKILL)
    assert not [line for line in since.splitlines() if "revoked" in line or " assigned [" in line]


async def test_partitions_added_while_reading_are_read_by_receivers_and_direct_mode(secure, tracker, tmp_path) -> None:
    topic = await create_topic(secure.bootstrap, 1)
    await produce(secure.bootstrap, topic, 100, 1)
    config = write_config(tmp_path / "sluice.toml", secure.bootstrap, topic, f"g-{topic}", "metadata_max_age_ms = 500")
    direct = KafkaOffsets(secure.bootstrap, TopicSelection(topics=(topic,)), f"d-{topic}")
    proc = receiver(tmp_path, tracker.address, config, "grow", "grow")
    try:
        direct.start()
        assert direct.partitions() == [(topic, 0)]
        await eventually(lambda: _at_least(tracker.address, 100), timeout=60, interval=0.2, message="first 100")
        admin = AIOKafkaAdminClient(bootstrap_servers=secure.bootstrap)
        await admin.start()
        try:
            await admin.create_partitions({topic: NewPartitions(total_count=3)})
        finally:
            await admin.close()
        await produce(secure.bootstrap, topic, 90, 3, start=100)  # 30 to each partition, two of them new
        await eventually(lambda: _at_least(tracker.address, 190), timeout=60, interval=0.2, message="all 190")
        assert sorted(direct.partitions()) == [(topic, 0), (topic, 1), (topic, 2)]
        ends = direct.latest_offsets()
        assert ends == {(topic, 0): 130, (topic, 1): 30, (topic, 2): 30}
        new = await asyncio.to_thread(lambda: list(read_range(secure.bootstrap, OffsetRange(topic, 2, 0, 30))))
        assert sorted(int(r.value) for r in new) == list(range(101, 190, 3))
        assert stop_process(proc) == 0
    finally:
        direct.close()
        stop_process(proc, signal.SIGKILL)
    records = records_of(await allocate_all(tracker.address))
    assert sorted(int(r.value) for r in records) == list(range(190))
    assert {r.partition for r in records} == {0, 1, 2}


def test_static_membership_without_a_fixed_receiver_id_is_refused_at_start(tmp_path) -> None:
    config = write_config(
        tmp_path / "sluice.toml", "127.0.0.1:9", "t", "g", kafka="static_membership = true"
    )  # nothing listens there: the check comes before any connection
    done = subprocess.run(
        [sys.executable, *receiver_argv(None, extra=["--config", str(config)])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "kafka.static_membership needs receiver.receiver_id" in done.stderr
