"""Reading one offset range inside a Spark task (Spark's ``KafkaRDD.compute``).

Each partition of a direct-mode batch RDD is one Kafka partition's ``[from, until)``.  The task
runs in a PySpark worker, which has no event loop of its own, so the reader creates a private loop
and drives an aiokafka consumer one ``getmany`` chunk at a time, yielding records between chunks:
memory stays bounded by one chunk plus the consumer's fetch buffer, whatever the range's size.

Gaps are normal (compacted topics, transaction markers): the range is done once the consumer's
position reaches ``until``, not when ``until - from`` records were seen.  A range that stops
making progress for ``poll_timeout_ms`` fails the task with an error that names the range
(Spark's ``spark.streaming.kafka.consumer.poll.ms``), and offsets that are no longer in the log
fail it with the broker's error instead of silently skipping data.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sluice.block_info import OffsetRange

DEFAULT_CHUNK = 2000
DEFAULT_POLL_TIMEOUT_MS = 60_000


class RangeReadError(RuntimeError):
    """An offset range could not be read completely; the message names it."""


def read_range(bootstrap_servers: str, offset_range: OffsetRange, *,
               client_options: Mapping[str, Any] | None = None, chunk: int = DEFAULT_CHUNK,
               poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS) -> Iterator[Any]:
    """Yield ``sluice.records.Record`` for every record of ``offset_range``, in offset order."""
    from sluice.records import Record

    if offset_range.count == 0:
        return
    from aiokafka import AIOKafkaConsumer, TopicPartition

    r = offset_range
    tp = TopicPartition(r.topic, r.partition)
    loop = asyncio.new_event_loop()

    async def open_consumer() -> Any:  # aiokafka binds to the running loop at construction
        nonlocal consumer
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="none", max_partition_fetch_bytes=1 << 20,
                                    **dict(client_options or {}))
        await consumer.start()
        consumer.assign([tp])
        consumer.seek(tp, r.from_offset)

    consumer: Any = None
    try:
        loop.run_until_complete(open_consumer())
        next_offset = r.from_offset
        last_progress = time.monotonic()
        while next_offset < r.until_offset:
            want = min(chunk, r.until_offset - next_offset)
            try:
                fetched = loop.run_until_complete(consumer.getmany(tp, timeout_ms=500, max_records=want))
            except Exception as exc:
                raise RangeReadError(f"reading {_name(r)} failed at offset {next_offset}: "
                                     f"{type(exc).__name__}: {exc}") from exc
            records = fetched.get(tp, ())
            out = []
            for m in records:
                if m.offset >= r.until_offset:
                    break
                if m.offset < next_offset:
                    continue
                out.append(Record(m.key, m.value, m.topic, m.partition, m.offset, m.timestamp))
            if out:
                next_offset = out[-1].offset + 1
                last_progress = time.monotonic()
                yield from out
                continue
            position = loop.run_until_complete(consumer.position(tp))
            if position > next_offset:  # skipped a gap (compaction, transaction markers)
                next_offset = position
                last_progress = time.monotonic()
            elif (time.monotonic() - last_progress) * 1000 > poll_timeout_ms:
                raise RangeReadError(f"reading {_name(r)}: no record after offset {next_offset} "
                                     f"for {poll_timeout_ms} ms; is the range still in the log?")
    finally:
        try:
            if consumer is not None:
                loop.run_until_complete(consumer.stop())
        finally:
            loop.close()


def read_partition(bootstrap_servers: str, client_options: Mapping[str, Any], chunk: int,
                   poll_timeout_ms: int, wires: Iterable[list]) -> Iterator[Any]:
    """``mapPartitions`` body: the partition holds one range's wire form; read it.

    A module-level function bound with ``functools.partial``, so Spark pickles it by reference.
    """
    for wire in wires:
        yield from read_range(bootstrap_servers, OffsetRange.from_wire(wire), client_options=client_options,
                              chunk=chunk, poll_timeout_ms=poll_timeout_ms)


def _name(r: OffsetRange) -> str:
    return f"{r.topic}/{r.partition} [{r.from_offset}, {r.until_offset})"


def kafka_rdd(sc: Any, ranges: Iterable[OffsetRange], bootstrap_servers: str, *,
              client_options: Mapping[str, Any] | None = None, chunk: int = DEFAULT_CHUNK,
              poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS) -> Any:
    """Spark's ``KafkaRDD``: one partition per offset range, each task reading its range.

    ``parallelize`` with as many slices as elements gives exactly one range per partition, so
    Spark schedules (and retries) each Kafka partition's read as its own task.
    """
    from functools import partial

    wires = [r.to_wire() for r in ranges]
    if not wires:
        return sc.emptyRDD()
    body = partial(read_partition, bootstrap_servers, dict(client_options or {}), chunk, poll_timeout_ms)
    return sc.parallelize(wires, len(wires)).mapPartitions(body, preservesPartitioning=True)
