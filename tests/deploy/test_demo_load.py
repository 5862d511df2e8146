"""The demo's load generator offers exactly its profile's records to a real broker, numbered."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from sluice.demo.load import produce
from sluice.demo.profile import parse

pytestmark = pytest.mark.kafka


def test_offers_the_profile_and_reports_progress(kafka_broker) -> None:
    topic = kafka_broker.create_topic(partitions=2)
    profile = parse("400@0.5,1000@0.5", 1, 1)
    out = io.StringIO()
    acked = asyncio.run(produce(kafka_broker.bootstrap, topic, profile, out=out, report_s=0.1))
    assert acked == profile.records_until(profile.seconds) == 700
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[-1]["done"] and lines[-1]["acked"] == 700 and lines[-1]["failed"] == 0
    assert {line["rate"] for line in lines[:-1]} <= {0.0, 400.0, 1000.0}  # 0 once the profile ended

    assert sorted(asyncio.run(_read_seqs(kafka_broker.bootstrap, topic, 700))) == list(range(700))


async def _read_seqs(bootstrap: str, topic: str, n: int) -> list[int]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    seqs: list[int] = []
    try:

        async def drain() -> None:
            while len(seqs) < n:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    seqs.extend(int(r.value.split(b" ", 1)[0]) for r in records)

        await asyncio.wait_for(drain(), 30)
    finally:
        await consumer.stop()
    return seqs
