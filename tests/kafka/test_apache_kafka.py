"""Apache Kafka's real broker, as ``sluice.embedded.kafka`` starts it, with aiokafka as the client.

What tansu cannot show: transactions (a ``read_committed`` consumer skips an aborted one), SCRAM
logins, mutual TLS with the certificate's CN as the principal, the StandardAuthorizer's refusals,
and the oldest release Sluice is checked against.  One secured broker of the default release
serves every test of that release (its PLAINTEXT listener is the harness's super user); the oldest
release runs without security, so both ways of starting are exercised.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import GroupAuthorizationFailedError, KafkaConnectionError, TopicAuthorizationFailedError

from sluice.embedded import create_topic, maven
from sluice.embedded.certs import CertificateAuthority
from sluice.embedded.kafka import DEFAULT_VERSION, OLDEST_VERSION, KafkaBroker, kafka_jars, start_kafka
from sluice.embedded.kafka_config import Security
from sluice.embedded.maven import fetch_jars, maven_dir
from sluice.embedded.processes import ProcessError

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def secure_kafka() -> Iterator[KafkaBroker]:
    """The default release with every listener, two SCRAM users and the StandardAuthorizer."""
    broker = start_kafka(
        security=Security(users=USERS, listeners=("SASL_PLAINTEXT", "SSL", "SASL_SSL"), authorizer=True)
    )
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def oldest_kafka() -> Iterator[KafkaBroker]:
    """The oldest release Sluice supports, started by the same code without security."""
    broker = start_kafka(version=OLDEST_VERSION)
    yield broker
    broker.stop()


@pytest.fixture(params=["default", "oldest"])
def kafka(request: pytest.FixtureRequest) -> KafkaBroker:
    """Each release in turn, for what both must do alike."""
    return request.getfixturevalue("secure_kafka" if request.param == "default" else "oldest_kafka")


async def produce(options: dict[str, Any], topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = AIOKafkaProducer(request_timeout_ms=10000, **options)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=partition)
    finally:
        await producer.stop()


async def read_to_end(
    options: dict[str, Any], topic: str, partitions: int = 1, isolation_level: str = "read_uncommitted"
) -> dict[int, list[bytes]]:
    """Every value of ``topic`` up to its end offsets as of now (the last stable offset under
    ``read_committed``), by partition: reaching the end is what ends the read, not a quiet spell."""
    consumer = AIOKafkaConsumer(isolation_level=isolation_level, enable_auto_commit=False, **options)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        values: dict[int, list[bytes]] = {p: [] for p in range(partitions)}

        async def behind() -> bool:
            return any([await consumer.position(tp) < end[tp] for tp in tps])

        async def drain() -> None:
            while await behind():
                for tp, records in (await consumer.getmany(*tps, timeout_ms=1000)).items():
                    values[tp.partition] += [r.value for r in records]

        await asyncio.wait_for(drain(), 30)
        return values
    finally:
        await consumer.stop()


def test_the_pinned_releases_are_fetched_once_and_answered_from_the_cache() -> None:
    kafka_jars(DEFAULT_VERSION)  # the fixtures may not have run yet
    began = time.monotonic()
    jars = kafka_jars(DEFAULT_VERSION)
    assert time.monotonic() - began < 0.5
    assert {j.name for j in jars} >= {f"kafka_2.13-{DEFAULT_VERSION}.jar", f"kafka-clients-{DEFAULT_VERSION}.jar"}
    assert all(j.parent == maven_dir(f"kafka-{DEFAULT_VERSION}") for j in jars)
    done = subprocess.run(
        [sys.executable, "-m", "sluice.embedded", "--fetch", "--version", DEFAULT_VERSION],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"Apache Kafka {DEFAULT_VERSION}: {len(jars)} jars in {jars[0].parent}" in done.stdout


def test_concurrent_fetches_of_one_name_resolve_it_once_and_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"test-concurrent-{uuid.uuid4().hex[:8]}"
    coordinates = ["org.slf4j:slf4j-api:1.7.36"]
    results: list[list[str]] = []
    errors: list[BaseException] = []
    runs: list[list[str]] = []
    run = subprocess.run

    def counted(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        runs.append(command)
        return run(command, **kwargs)

    monkeypatch.setattr(maven.subprocess, "run", counted)

    def fetch() -> None:
        try:
            results.append([j.name for j in fetch_jars(name, coordinates)])
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    # flock locks belong to open file descriptions, so two threads contend as two processes would
    threads = [threading.Thread(target=fetch) for _ in range(3)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors and results == [["slf4j-api-1.7.36.jar"]] * 3
        assert len(runs) == 1  # the two that waited for the lock found the work done
        assert not list(maven_dir(name).parent.glob(f".{name}.partial"))
    finally:
        shutil.rmtree(maven_dir(name), ignore_errors=True)


def test_coordinates_central_does_not_serve_fail_naming_them_and_cache_nothing() -> None:
    name = f"test-missing-{uuid.uuid4().hex[:8]}"
    missing = "org.apache.kafka:sluice-no-such-artifact:0.0.1"
    with pytest.raises(ProcessError) as failure:
        fetch_jars(name, [missing])
    assert missing in str(failure.value) and "repo.maven.apache.org" in str(failure.value)
    assert not maven_dir(name).exists()


async def test_records_round_trip_in_order_per_partition(kafka: KafkaBroker) -> None:
    topic = await create_topic(kafka.bootstrap, 2)
    options = kafka.client_options()
    await produce(options, topic, [b"a0", b"a1", b"a2"], partition=0)
    await produce(options, topic, [b"b0", b"b1"], partition=1)
    assert await read_to_end(options, topic, partitions=2) == {0: [b"a0", b"a1", b"a2"], 1: [b"b0", b"b1"]}


async def test_read_committed_sees_committed_transactions_only(kafka: KafkaBroker) -> None:
    topic = await create_topic(kafka.bootstrap)
    options = kafka.client_options()
    producer = AIOKafkaProducer(transactional_id=f"tx-{uuid.uuid4().hex[:8]}", **options)
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_and_wait(topic, b"committed-1", partition=0)
            await producer.send_and_wait(topic, b"committed-2", partition=0)
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aborted", partition=0)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"committed-3", partition=0)
    finally:
        await producer.stop()
    committed = await read_to_end(options, topic, isolation_level="read_committed")
    everything = await read_to_end(options, topic, isolation_level="read_uncommitted")
    assert committed == {0: [b"committed-1", b"committed-2", b"committed-3"]}
    assert everything == {0: [b"committed-1", b"committed-2", b"aborted", b"committed-3"]}


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
async def test_scram_sha_512_admits_the_right_password(secure_kafka: KafkaBroker, protocol: str) -> None:
    topic = await create_topic(secure_kafka.bootstrap)
    secure_kafka.allow("alice", ["Write", "Read"], topic=topic)
    options = secure_kafka.client_options(protocol, user="alice")
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    await produce(options, topic, [protocol.encode()])
    assert await read_to_end(options, topic) == {0: [protocol.encode()]}


async def test_scram_refuses_a_wrong_password_saying_so(
    secure_kafka: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    producer = AIOKafkaProducer(**secure_kafka.client_options("SASL_PLAINTEXT", user="alice", password="wrong"))
    with caplog.at_level(logging.ERROR, "aiokafka"), pytest.raises(KafkaConnectionError):
        try:
            await producer.start()
        finally:
            await producer.stop()
    # aiokafka's start() only says it could not bootstrap; the broker's reason is in its log
    assert "SaslAuthenticationFailed" in caplog.text and "invalid credentials" in caplog.text


async def test_mutual_tls_maps_the_certificate_to_its_principal(secure_kafka: KafkaBroker) -> None:
    topic = await create_topic(secure_kafka.bootstrap)
    options = secure_kafka.client_options("SSL", user="alice")
    with pytest.raises(TopicAuthorizationFailedError):  # CN=alice is User:alice, who has no ACL yet
        await produce(options, topic, [b"refused"])
    secure_kafka.allow("alice", ["Write", "Read"], topic=topic)
    await produce(options, topic, [b"over mTLS"])
    assert await read_to_end(options, topic) == {0: [b"over mTLS"]}


async def test_tls_without_a_certificate_from_the_brokers_ca_is_refused(secure_kafka: KafkaBroker, tmp_path) -> None:
    topic = await create_topic(secure_kafka.bootstrap)
    secure_kafka.allow("alice", ["Write"], topic=topic)  # so that only the certificate is missing
    options = secure_kafka.client_options("SSL", user="alice")
    options["ssl_context"] = secure_kafka.ca.client_context()  # trusts the broker, presents nothing
    with pytest.raises(KafkaConnectionError):
        await produce(options, topic, [b"x"])
    stranger = CertificateAuthority(tmp_path / "other-ca").client("alice")
    context = ssl.create_default_context(cafile=str(secure_kafka.ca.cert))
    context.load_cert_chain(str(stranger.cert), str(stranger.key))
    options["ssl_context"] = context
    with pytest.raises(KafkaConnectionError):
        await produce(options, topic, [b"x"])


async def test_a_principal_without_acls_is_refused_topics_and_groups(secure_kafka: KafkaBroker) -> None:
    topic = await create_topic(secure_kafka.bootstrap)
    options = secure_kafka.client_options("SASL_PLAINTEXT", user="bob")
    with pytest.raises(TopicAuthorizationFailedError):
        await produce(options, topic, [b"x"])
    secure_kafka.allow("bob", ["Read", "Describe"], topic=topic)  # the topic, but not the group
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = AIOKafkaConsumer(topic, group_id=group, **options)
    with pytest.raises(GroupAuthorizationFailedError):
        try:
            await consumer.start()
            await consumer.getmany(timeout_ms=5000)
        finally:
            await consumer.stop()
    admin = secure_kafka.client_options("SASL_PLAINTEXT", user="admin")  # the super user needs no ACL
    await produce(admin, topic, [b"by admin"])
    assert await read_to_end(admin, topic) == {0: [b"by admin"]}
