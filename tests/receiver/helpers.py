"""Shared helpers of the receiver tests: read back what the tracker accepted."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from sluice.block_info import ReceivedBlockInfo
from sluice.records import Record
from sluice.storage.block_store import read_block
from sluice.tracker.client.tracker_client import TrackerClient


async def allocate_all(address: str) -> list[ReceivedBlockInfo]:
    """Allocate every unallocated block to one batch and return them (all streams)."""
    async with TrackerClient(address, "admin") as admin:
        blocks = await admin.allocate_blocks(int(time.time() * 1000))
    return [b for stream_blocks in (blocks or {}).values() for b in stream_blocks]


def records_of(blocks: list[ReceivedBlockInfo], options: dict | None = None) -> list[Any]:
    """The records the tracker accepted, skipping offsets outside each block's recorded ranges."""
    out: list[Any] = []
    for info in blocks:
        block = read_block(info.location, options)
        if not info.offset_ranges:
            out.extend(block.records)
            continue
        ranges = {(r.topic, r.partition): (r.from_offset, r.until_offset) for r in info.offset_ranges}
        for rec in block.records:
            assert isinstance(rec, Record)
            span = ranges.get((rec.topic, rec.partition))
            if span is not None and span[0] <= rec.offset < span[1]:
                out.append(rec)
    return out


def duplicates(keys: list[Any]) -> dict[Any, int]:
    return {k: n for k, n in Counter(keys).items() if n > 1}


def scrape(port: int, name: str, labels: dict[str, str] | None = None) -> float | None:
    """One sample's value from the Prometheus endpoint of a service process on ``port``."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                return sample.value
    return None


def record_acquires(limiter: Any) -> list[float]:
    """The permits of every ``acquire`` on ``limiter`` from now on, in order (the limiter still works)."""
    acquired: list[float] = []
    acquire = limiter.acquire

    async def recording_acquire(permits: float = 1) -> float:
        acquired.append(permits)
        return await acquire(permits)

    limiter.acquire = recording_acquire
    return acquired


async def past_the_log(bootstrap: str, topic: str, group: str) -> None:
    """Commit offset 10,000 of ``topic``/0 for ``group``: a fetch from there is past the log's end,
    which Apache Kafka answers with OFFSET_OUT_OF_RANGE."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    committer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await committer.start()
    try:
        committer.assign([TopicPartition(topic, 0)])
        await committer.commit({TopicPartition(topic, 0): 10_000})
    finally:
        await committer.stop()
