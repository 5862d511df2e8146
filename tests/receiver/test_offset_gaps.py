"""Offsets a fetch skips: waited on, then taken loudly or refused, never skipped in silence.

A broker whose log sits on a store under faults (tansu on S3) can show a batch before an earlier one
is readable; Apache Kafka does not, so for a moment the fetched bytes lack the second of three
batches, as such a broker sends them.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sluice.embedded import create_topic
from sluice.kafka.fetcher import RecordBatchFetcher
from sluice.kafka.offsets import DataLossError
from sluice.kafka.record_batches import scan_batches
from sluice.receiver.metrics import ERRORS
from sluice.receiver.sources.kafka import KafkaReceiver
from sluice.tracker.client.tracker_client import TrackerClient
from tests.polling import eventually

from .helpers import allocate_all, records_of
from .test_kafka_receiver import committed, make_supervisor, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LATE_S = 1.5  # how long the batch at offset 10 stays hidden behind the one at 20


@pytest.fixture
def late_batch(monkeypatch):
    """Fetched responses lack the batch at offset 10 until LATE_S after the first that lacked it."""
    fetch_next = RecordBatchFetcher.fetch_next
    first: list[float] = []

    async def fetch(self, positions):
        fetched = await fetch_next(self, positions)
        if not first or time.monotonic() - first[0] < LATE_S:
            for tp, data in fetched.data.items():
                shown = b"".join(bytes(data[s.start : s.end]) for s in scan_batches(data) if s.base_offset != 10)
                if shown != data:
                    first[:] = first or [time.monotonic()]
                    fetched.data[tp] = shown
        return fetched

    monkeypatch.setattr(RecordBatchFetcher, "fetch_next", fetch)


async def stored(kafka_broker, tracker_process, tmp_path, rid: str, **options) -> list[int]:
    """Three batches (offsets 0-9, 10-19, 20-29) through a receiver; the values the tracker holds."""
    topic = await create_topic(kafka_broker.bootstrap, 1)
    for start in (0, 10, 20):
        await produce(kafka_broker.bootstrap, topic, 10, 1, start=start)
    group = f"g-{topic}"
    async with TrackerClient(tracker_process.address, "receiver") as client:
        sup = make_supervisor(KafkaReceiver(kafka_broker.bootstrap, topic, group, **options), client, tmp_path, rid)
        await sup.start()
        if options.get("fail_on_data_loss"):
            with pytest.raises(DataLossError, match=r"/0: offsets \[10, 20\) are not in the log"):
                await asyncio.wait_for(sup.await_termination(), 30)
        else:

            async def all_committed() -> bool:
                return (await committed(kafka_broker.bootstrap, group, topic, 1))[0] == 30

            await eventually(all_committed, timeout=30, message="offset 30 committed")
            await sup.stop()
    return [int(r.value) for r in records_of(await allocate_all(tracker_process.address))]


async def test_a_batch_shown_late_is_waited_for_and_nothing_is_skipped(
    kafka_broker, tracker_process, tmp_path, late_batch, caplog
):
    values = await stored(kafka_broker, tracker_process, tmp_path, "gap-wait", gap_wait_ms=10_000)
    assert values == list(range(30))
    assert ERRORS.labels("0", "gap-wait", "offset_gap")._value.get() == 0 and "skipping" not in caplog.text


async def test_without_a_wait_the_gap_is_taken_with_a_warning_and_counted(
    kafka_broker, tracker_process, tmp_path, late_batch, caplog
):
    values = await stored(kafka_broker, tracker_process, tmp_path, "gap-take")
    assert values == [*range(10), *range(20, 30)]
    assert ERRORS.labels("0", "gap-take", "offset_gap")._value.get() == 1
    assert "skipping missing records" in caplog.text and "/0: offsets [10, 20) are not in the log" in caplog.text


async def test_under_fail_on_data_loss_the_gap_stops_the_receiver_after_the_records_before_it(
    kafka_broker, tracker_process, tmp_path, late_batch
):
    values = await stored(kafka_broker, tracker_process, tmp_path, "gap-fail", fail_on_data_loss=True)
    assert values == list(range(10))
