"""KafkaReceiver in-process against Apache Kafka and a real tracker."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sluice.block_info import ReceivedBlockInfo
from sluice.embedded import create_topic
from sluice.kafka.client_settings import consumer_options
from sluice.kafka.fetcher import RecordBatchFetcher
from sluice.receiver import metrics
from sluice.receiver.sources import kafka as kafka_source
from sluice.receiver.sources.kafka import KafkaReceiver
from sluice.receiver.supervisor import ReceiverSupervisor
from sluice.spark_driver.ui.api import receiver_entries, receivers_json
from sluice.storage import block_format
from sluice.storage.block_store import open_block_store
from sluice.testing.record_batches import batch, produce_batch, record
from sluice.tracker.client.tracker_client import TrackerClient
from tests.direct.conftest import open_transaction
from tests.polling import eventually

from .helpers import allocate_all, duplicates, past_the_log, record_acquires, records_of

pytestmark = pytest.mark.kafka


async def produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value=b"%d" % i, key=b"k%d" % i, partition=i % partitions)
            for i in range(start, start + count)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()


def make_supervisor(receiver, client, tmp_path: Path, rid: str, **options) -> ReceiverSupervisor:
    return ReceiverSupervisor(
        receiver,
        client,
        open_block_store((tmp_path / "blocks").as_uri()),
        stream_id=0,
        receiver_id=rid,
        block_interval_ms=100,
        restart_delay_ms=200,
        heartbeat_interval_ms=200,
        **options,
    )


def block_kind(info: ReceivedBlockInfo) -> str:
    return block_format.decode(Path(urlsplit(info.location).path).read_bytes())[0]["kind"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("client", "kind"),
    [
        ({}, "kafka-batches"),
        ({"isolation_level": "read_committed"}, "kafka-batches"),
        ({"value_deserializer": bytes}, "kafka"),
    ],
)
async def test_records_are_stored_with_offset_ranges_and_committed_after_ack(
    kafka_broker, tracker_process, tmp_path, client, kind
):
    """Both ways of fetching: record batches of the receiver's own requests (read committed or
    not), and (with a deserializer) the consumer's records encoded into columns."""
    topic = await create_topic(kafka_broker.bootstrap, 2)
    await produce(kafka_broker.bootstrap, topic, 2_000, 2)
    group = f"g-{topic}"
    async with TrackerClient(tracker_process.address, "receiver") as client_:
        receiver = KafkaReceiver(kafka_broker.bootstrap, topic, group, client=client)
        sup = make_supervisor(receiver, client_, tmp_path, "k-0")
        await sup.start()
        await eventually(lambda: sup.pusher.records_stored == 2_000, timeout=60)
        await eventually(lambda: receiver.lag() == 0, timeout=10)
        await sup.stop()
    blocks = await allocate_all(tracker_process.address)
    assert {block_kind(info) for info in blocks} == {kind}
    records = records_of(blocks)
    assert sorted(int(r.value) for r in records) == list(range(2_000))
    assert all(r.topic == topic and r.key == b"k%s" % r.value for r in records)
    for info in blocks:
        assert info.offset_ranges and sum(r.count for r in info.offset_ranges) == info.num_records
    assert await committed(kafka_broker.bootstrap, group, topic, 2) == {0: 1_000, 1: 1_000}


@pytest.mark.slow
async def test_read_committed_leaves_aborted_transactions_out_and_keeps_odd_header_keys(
    kafka_broker, tracker_process, tmp_path
):
    """Under read_committed the receiver's own fetches leave out an aborted transaction, one batch
    per fetch (so a fetch ends before its marker), and a header key that is not UTF-8 comes
    through as bytes (aiokafka's consumer refuses the whole fetch)."""
    topic = await create_topic(kafka_broker.bootstrap, 1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, transactional_id=f"{topic}-tx")
    await producer.start()
    try:
        for values, commit in (([b"a", b"b"], True), ([b"x1", b"x2", b"x3"], False)):
            await producer.begin_transaction()
            for value in values:
                await producer.send_and_wait(topic, value, partition=0)  # a batch each
            await (producer.commit_transaction() if commit else producer.abort_transaction())
    finally:
        await producer.stop()
    odd = record(0, b"odd", headers=[(b"\xff\xfe", b"x")])
    await produce_batch(kafka_broker.bootstrap, topic, 0, batch(0, [odd]), 1)  # offset 7, after the marker at 6
    options = {"isolation_level": "read_committed", "max_partition_fetch_bytes": 64}
    async with TrackerClient(tracker_process.address, "receiver") as client:
        receiver = KafkaReceiver(kafka_broker.bootstrap, topic, f"g-{topic}", client=options)
        sup = make_supervisor(receiver, client, tmp_path, "k-rc")
        await sup.start()
        await eventually(lambda: receiver.lag() == 0, timeout=60)
        await sup.stop()
    records = records_of(await allocate_all(tracker_process.address))
    assert [(r.offset, r.value) for r in records] == [(0, b"a"), (1, b"b"), (7, b"odd")]
    assert records[-1].headers == ((b"\xff\xfe", b"x"),)


@pytest.mark.slow
async def test_a_second_member_takes_over_revoked_partitions_without_loss_or_duplicates(
    kafka_broker, tracker_process, tmp_path
):
    topic = await create_topic(kafka_broker.bootstrap, 4)
    group = f"g-{topic}"
    await produce(kafka_broker.bootstrap, topic, 4_000, 4)
    async with TrackerClient(tracker_process.address, "receiver") as client:
        first = KafkaReceiver(kafka_broker.bootstrap, topic, group, client={"max_partition_fetch_bytes": 4096})
        sup1 = make_supervisor(first, client, tmp_path, "k-1")
        sup1.limiter.set_rate(4_000)  # slow enough that the rebalance happens mid-stream
        await sup1.start()
        await eventually(lambda: sup1.pusher.records_stored > 500, timeout=60)
        second = KafkaReceiver(kafka_broker.bootstrap, topic, group)
        sup2 = make_supervisor(second, client, tmp_path, "k-2")
        await sup2.start()
        await produce(kafka_broker.bootstrap, topic, 4_000, 4, start=4_000)
        total = lambda: sup1.pusher.records_stored + sup2.pusher.records_stored  # noqa: E731
        await eventually(lambda: first.lag() == 0 and second.lag() == 0 and total() >= 8_000, timeout=90)
        await asyncio.gather(sup1.stop(), sup2.stop())
    records = records_of(await allocate_all(tracker_process.address))
    values = [int(r.value) for r in records]
    assert not duplicates([(r.partition, r.offset) for r in records])
    assert sorted(values) == list(range(8_000))
    assert sup2.pusher.records_stored > 0


@pytest.mark.slow
async def test_a_fetch_is_stored_in_limiter_sized_pieces_each_with_its_offsets(kafka_broker, tracker_process, tmp_path):
    """At 2,000 records/s and 100 ms blocks no acquire takes more than 200 permits (a fetch holds up
    to 1,000), and the blocks' offset ranges tile the partition in order: each piece kept its own."""
    topic = await create_topic(kafka_broker.bootstrap, 1)
    await produce(kafka_broker.bootstrap, topic, 3_000, 1)
    async with TrackerClient(tracker_process.address, "receiver") as client:
        receiver = KafkaReceiver(kafka_broker.bootstrap, topic, f"g-{topic}")
        sup = make_supervisor(receiver, client, tmp_path, "k-p", initial_rate=2_000)
        acquired = record_acquires(sup.limiter)
        await sup.start()
        await eventually(lambda: sup.pusher.records_stored == 3_000, timeout=60)
        await sup.stop()
    blocks = await allocate_all(tracker_process.address)
    assert max(acquired) <= 200 and sum(acquired) == 3_000
    ranges = sorted((r.from_offset, r.until_offset) for b in blocks for r in b.offset_ranges)
    assert ranges[0][0] == 0 and ranges[-1][1] == 3_000
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), ranges
    assert sorted(int(r.value) for r in records_of(blocks)) == list(range(3_000))


@pytest.mark.slow
async def test_a_committed_offset_past_the_log_resets_to_the_earliest_and_loses_nothing(
    kafka_broker, tracker_process, tmp_path
):
    """Kafka answers a fetch past the log's end with OFFSET_OUT_OF_RANGE; the receiver resets by its
    auto_offset_reset and reads the partition from the start."""
    topic = await create_topic(kafka_broker.bootstrap, 1)
    await produce(kafka_broker.bootstrap, topic, 300, 1)
    group = f"g-{topic}"
    await past_the_log(kafka_broker.bootstrap, topic, group)
    async with TrackerClient(tracker_process.address, "receiver") as client:
        receiver = KafkaReceiver(kafka_broker.bootstrap, topic, group)
        sup = make_supervisor(receiver, client, tmp_path, "k-r")
        await sup.start()
        await eventually(lambda: sup.pusher.records_stored == 300, timeout=60)
        await sup.stop()
    records = records_of(await allocate_all(tracker_process.address))
    assert sorted(int(r.value) for r in records) == list(range(300))
    assert await committed(kafka_broker.bootstrap, group, topic, 1) == {0: 300}


@pytest.mark.slow
async def test_storing_one_fetch_for_longer_than_max_poll_interval_keeps_the_group(
    kafka_broker, tracker_process, tmp_path
):
    """At 200 records/s one fetch of 1,500 records takes 7.5 s to store, more than the 3 s aiokafka
    allows between getmany calls: the receiver polls between pieces, so it is never taken out of
    the group (no revocation, every commit made)."""
    topic = await create_topic(kafka_broker.bootstrap, 1)
    await produce(kafka_broker.bootstrap, topic, 1_500, 1)
    group = f"g-{topic}"
    async with TrackerClient(tracker_process.address, "receiver") as client:
        receiver = KafkaReceiver(
            kafka_broker.bootstrap,
            topic,
            group,
            client={"max_poll_interval_ms": 3_000, "session_timeout_ms": 2_500, "heartbeat_interval_ms": 500},
        )
        revocations = []
        revoke = receiver.partitions_revoked

        async def counted(revoked):
            if revoked:  # the first join revokes nothing
                revocations.append(revoked)
            await revoke(revoked)

        receiver.partitions_revoked = counted
        sup = make_supervisor(receiver, client, tmp_path, "k-a", initial_rate=200)
        await sup.start()
        await eventually(lambda: sup.pusher.records_stored == 1_500, timeout=60)
        await eventually(lambda: receiver.lag() == 0, timeout=10)
        assert revocations == []
        await sup.stop()
    records = records_of(await allocate_all(tracker_process.address))
    assert sorted(int(r.value) for r in records) == list(range(1_500))
    assert await committed(kafka_broker.bootstrap, group, topic, 1) == {0: 1_500}


@pytest.mark.slow
async def test_a_rebalance_while_a_slow_member_stores_a_fetch_piece_by_piece_goes_through(
    kafka_broker, tracker_process, tmp_path, monkeypatch
):
    """At 200 records/s the first member stores its fetch of 2 x 1,000 records for 10 s, calling
    getmany between pieces; a second member joining must get its partition long before that
    (aiokafka's getmany waits while the group reassigns, and the reassignment waits for the store
    to pause).  Which member stores what after the rebalance is the group's timing, not asserted.
    getmany goes out after every piece here (once a second otherwise), so a revocation that comes
    while a piece is stored always meets it."""
    monkeypatch.setattr(kafka_source, "_ALIVE_EVERY_S", 0.0)
    topic = await create_topic(kafka_broker.bootstrap, 2)
    await produce(kafka_broker.bootstrap, topic, 2_000, 2)
    group = f"g-{topic}"
    async with TrackerClient(tracker_process.address, "receiver") as client:
        first = KafkaReceiver(kafka_broker.bootstrap, topic, group)
        sup1 = make_supervisor(first, client, tmp_path, "k-s1", initial_rate=200)
        await sup1.start()
        await eventually(lambda: sup1.pusher.records_stored >= 200, timeout=60)
        second = KafkaReceiver(kafka_broker.bootstrap, topic, group)
        sup2 = make_supervisor(second, client, tmp_path, "k-s2", initial_rate=200)
        await sup2.start()
        assert second.consumer is not None
        await eventually(lambda: second.consumer.assignment(), timeout=30, message="the second member assigned")
        assert sup1.pusher.records_stored < 2_000  # the first member was still storing its fetch
        await eventually(lambda: sup1.pusher.records_stored + sup2.pusher.records_stored >= 2_000, timeout=60)
        await asyncio.gather(sup1.stop(), sup2.stop())
    records = records_of(await allocate_all(tracker_process.address))
    assert not duplicates([(r.partition, r.offset) for r in records])
    assert sorted(int(r.value) for r in records) == list(range(2_000))


@pytest.mark.slow
async def test_a_fetch_cut_inside_its_first_batch_is_fetched_again(
    kafka_broker, tracker_process, tmp_path, monkeypatch, caplog
):
    """Kafka cuts a response at its byte limits, possibly inside a partition's first batch; it
    does not on demand, so the first round is cut here: nothing of it is stored, the receiver says so and
    fetches the partition again from the same offset."""
    topic = await create_topic(kafka_broker.bootstrap, 1)
    await produce(kafka_broker.bootstrap, topic, 200, 1)
    fetch_next = RecordBatchFetcher.fetch_next
    cut = []

    async def cut_once(self, positions):
        fetched = await fetch_next(self, positions)
        for tp, data in fetched.data.items():
            if data and not cut:
                cut.append(tp)
                fetched.data[tp] = data[:30]  # inside the header of the first batch
        return fetched

    monkeypatch.setattr(RecordBatchFetcher, "fetch_next", cut_once)
    async with TrackerClient(tracker_process.address, "receiver") as client:
        receiver = KafkaReceiver(kafka_broker.bootstrap, topic, f"g-{topic}")
        sup = make_supervisor(receiver, client, tmp_path, "k-c")
        await sup.start()
        await eventually(lambda: sup.pusher.records_stored == 200, timeout=60)
        await sup.stop()
    assert cut and "hold no whole record batch; fetching again" in caplog.text
    records = records_of(await allocate_all(tracker_process.address))
    assert sorted(int(r.value) for r in records) == list(range(200))


def test_kafka_client_table_passes_through_and_ssl_files_become_a_context(tmp_path: Path):
    options = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
    }
    assert consumer_options(options) == options
    import ssl

    from sluice.embedded.certs import self_signed

    pair = self_signed(tmp_path, common_name="test")
    key, cert = pair.key, pair.cert
    built = consumer_options(
        {"security_protocol": "SSL", "ssl_cafile": str(cert), "ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    )
    assert built["security_protocol"] == "SSL" and isinstance(built["ssl_context"], ssl.SSLContext)
    assert not any(k in built for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"))


def test_an_aiokafka_without_the_consumer_client_is_refused_by_version():
    """The receiver's own fetches ride on aiokafka's private consumer client: a release without
    it fails at start, naming the versions that work, not deep inside a fetch."""
    from types import SimpleNamespace

    with pytest.raises(RuntimeError, match=r"needs aiokafka >= 0\.13, < 0\.15"):
        RecordBatchFetcher(SimpleNamespace(), {})


@pytest.mark.slow
async def test_read_committed_lag_ends_at_the_last_stable_offset_and_open_transactions_are_shown(
    kafka_broker, tracker_process, tmp_path
):
    """A producer holds a transaction of 7 records open after 5 committed ones: the receiver takes
    the 5, is 0 behind the last stable offset, and shows the 7 as held back, in its gauge, to the
    tracker and on the streaming page's receivers; after the commit it takes them and shows none."""
    topic = await create_topic(kafka_broker.bootstrap, 1)
    await produce(kafka_broker.bootstrap, topic, 5, 1)
    labels = {"stream": "0", "receiver": "k-tx", "topic": topic, "partition": "0"}
    gauge = lambda: metrics.REGISTRY.get_sample_value("sluice_receiver_kafka_open_transaction_records", labels)  # noqa: E731
    async with TrackerClient(tracker_process.address, "receiver") as client:
        receiver = KafkaReceiver(
            kafka_broker.bootstrap, topic, f"g-{topic}", client={"isolation_level": "read_committed"}
        )
        sup = make_supervisor(receiver, client, tmp_path, "k-tx")
        with open_transaction(kafka_broker.bootstrap, topic, 7):
            await sup.start()
            await eventually(lambda: sup.pusher.records_stored == 5 and receiver.open_transaction_records() == 7)
            assert receiver.lag() == 0 and gauge() == 7

            async def shown() -> list:
                return receiver_entries(await client.status())

            entries = await eventually(lambda: _held(shown(), 7), message="the tracker shows the open records")
            assert receivers_json(entries, [], 1000)[0]["openTransactionRecords"] == 7
        await eventually(lambda: sup.pusher.records_stored == 12 and receiver.open_transaction_records() == 0)
        assert gauge() == 0
        await sup.stop()


async def _held(entries: Coroutine[Any, Any, list], records: int) -> list | None:
    found = await entries
    return found if [e.get("open_transaction_records") for e in found] == [records] else None
