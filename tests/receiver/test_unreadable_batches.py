"""A record batch the receiver cannot read stops it, loudly and for good.

A broker only serves batches it accepted, so the fetched bytes of the partition's first batch are
forged on the way in, every round, as a broker with a damaged log would send them.
"""

from __future__ import annotations

import asyncio

import pytest

from sluice.embedded import create_topic
from sluice.kafka.fetcher import RecordBatchFetcher
from sluice.kafka.record_batches import BatchFormatError
from sluice.receiver.metrics import ERRORS, RESTARTS
from sluice.receiver.sources.kafka import KafkaReceiver
from sluice.tracker.client.tracker_client import TrackerClient

from .test_kafka_receiver import committed, make_supervisor, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def magic_3(batch: bytearray) -> None:
    batch[16] = 3


def forged_count(batch: bytearray) -> None:
    batch[57:61] = (1_000_000).to_bytes(4, "big")


def huge_offset_delta(batch: bytearray) -> None:
    batch[23:27] = (2**31 - 1).to_bytes(4, "big")


@pytest.mark.parametrize(
    ("forge", "problem"),
    [(magic_3, "magic 3"), (forged_count, "counts 1000000 records"), (huge_offset_delta, "high watermark")],
)
async def test_an_unreadable_batch_stops_the_receiver_naming_where_with_no_restart_and_no_commit(
    kafka_broker, tracker_process, tmp_path, monkeypatch, caplog, forge, problem
):
    topic = await create_topic(kafka_broker.bootstrap, 1)
    await produce(kafka_broker.bootstrap, topic, 50, 1)
    fetch_next = RecordBatchFetcher.fetch_next

    async def forged(self, positions):
        fetched = await fetch_next(self, positions)
        for tp, data in fetched.data.items():
            if data:
                batch = bytearray(data)
                forge(batch)
                fetched.data[tp] = bytes(batch)
        return fetched

    monkeypatch.setattr(RecordBatchFetcher, "fetch_next", forged)
    rid = f"bad-{forge.__name__}"
    async with TrackerClient(tracker_process.address, "receiver") as client:
        receiver = KafkaReceiver(kafka_broker.bootstrap, topic, f"g-{topic}")
        sup = make_supervisor(receiver, client, tmp_path, rid)
        await sup.start()
        with pytest.raises(BatchFormatError, match=problem):
            await asyncio.wait_for(sup.await_termination(), 60)
    assert "cannot be read" in caplog.text and f"{topic}/0 fetched at offset 0" in caplog.text
    assert ERRORS.labels("0", rid, "unreadable_batch")._value.get() == 1
    assert RESTARTS.labels("0", rid)._value.get() == 0
    assert sup.pusher.records_stored == 0
    assert (await committed(kafka_broker.bootstrap, f"g-{topic}", topic, 1))[0] is None
