"""The receiver bench's memory figure: what holding 100,000 fetched records costs, as the receiver's
pieces of record batches or as the records ``getmany`` returned (traced, and resident in a fresh
process whose heap earlier rounds did not grow)."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import sys
import tracemalloc
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from sluice.kafka.fetcher import RecordBatchFetcher
from sluice.kafka.record_batches import batch_pieces

PARTITIONS = 4


async def fetch(bootstrap: str, topic: str, records: int, encoded: bool) -> list:
    """The topic's first ``records`` records (or a few more), the consumer closed: as ``getmany``
    returned them, or as the receiver's buffer holds them (``encoded``: the record batches of its
    fetch requests, cut into pieces)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    held: list = []
    count = 0
    try:
        if encoded:
            consumer.pause(*partitions)
            fetcher = RecordBatchFetcher(consumer, {})
            positions = {tp: await consumer.position(tp) for tp in partitions}
        while count < records:
            if encoded:
                for tp, data in (await fetcher.fetch(positions)).data.items():
                    pieces = list(batch_pieces(tp.topic, tp.partition, data, positions[tp], lambda: sys.maxsize))
                    if pieces:
                        held += pieces
                        count += sum(piece.num_records for piece in pieces)
                        positions[tp] = pieces[-1].until_offset
            else:
                for messages in (await consumer.getmany(timeout_ms=200, max_records=records - count)).values():
                    held += messages
                    count += len(messages)
    finally:
        await consumer.stop()
    return held


def resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def resident_growth(bootstrap: str, topic: str, records: int, encoded: bool, out) -> None:
    """In a fresh process (its heap not grown by earlier rounds): how much its resident set grows
    from fetching ``records`` records and holding them, put on ``out`` in bytes."""
    gc.collect()
    before = resident_bytes()
    held = asyncio.run(fetch(bootstrap, topic, records, encoded))
    gc.collect()
    out.put(resident_bytes() - before)
    del held


async def buffered_memory(bootstrap: str, topic: str, records: int, encoded: bool) -> tuple[float, float]:
    """(traced MB, resident MB growth in a fresh process) of holding ``records`` fetched records,
    as the receiver's pieces of record batches or as the records ``getmany`` returned."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=resident_growth, args=(bootstrap, topic, records, encoded, out))
    child.start()
    rss = await asyncio.get_running_loop().run_in_executor(None, out.get, True, 120)
    child.join()
    gc.collect()
    tracemalloc.start()
    traced0 = tracemalloc.get_traced_memory()[0]
    held = await fetch(bootstrap, topic, records, encoded)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - traced0
    tracemalloc.stop()
    del held
    return traced / 1e6, rss / 1e6
