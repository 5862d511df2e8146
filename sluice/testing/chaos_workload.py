"""The fault campaign's workload: what runs on its client host, and the app the driver runs.

``python -m sluice.testing.chaos_workload COMMAND`` on the client host (the campaign's own process
is outside the test network and reaches it only through such commands):

* ``buckets NAME...`` creates the buckets; ``topic`` creates the topic;
* ``produce`` writes ids ``0, 1, 2...`` at a steady rate, id ``n`` to partition ``n % partitions``,
  and appends each id the broker acknowledged to a file (an id sent but not acknowledged may or
  may not be in the topic: the topic, not the producer, is the truth the checker compares with);
* ``ends`` writes each partition's end offset (the checker's topic: every offset below it);
* ``present`` writes which of some offsets hold a record (the checker's question about a gap);
* ``committed`` writes each partition's offset committed by a consumer group (the receivers');
* ``keys BUCKET PREFIX`` prints the number of objects under a prefix.

:func:`write_records` is the batch function (``--app sluice.testing.chaos_workload:write_records``):
each record's partition, offset, id and timestamp go through the idempotent JSON sink into
``$SLUICE_CHAOS_OUT/batch_time=<t>/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from sluice.embedded.tansu import create_topic

__all__ = ["write_records"]

SCHEMA = "partition int, offset long, id long, ts long"


def write_records(batch) -> None:
    if batch.is_empty:  # no job for an idle tick
        return
    # Two tasks a batch, each reading several blocks: a task per block costs more than its records here.
    rows = batch.rdd.coalesce(2).map(lambda r: (r.partition, r.offset, int(r.value), r.timestamp_ms))
    batch.write_json(os.environ["SLUICE_CHAOS_OUT"], batch.spark.createDataFrame(rows, SCHEMA))


async def produce(bootstrap: str, topic: str, partitions: int, rate: float, seconds: float, acked: Path) -> None:
    """Send ids at ``rate``/s for ``seconds``; never stops for a broker that is away (it reconnects)."""
    # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    # tansu on S3 keeps each produced batch as one object, lists a partition's objects on every fetch
    # and answers a fetch with one batch: batches of a few records (a short linger) make a long
    # campaign's fetches slower than its producer, so the producer gathers three seconds per batch.
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10_000, linger_ms=3000)
    while True:
        try:
            await producer.start()
            break
        except (KafkaError, OSError):
            await asyncio.sleep(1)
    pending: set[asyncio.Task] = set()
    with acked.open("a") as out:

        async def send(n: int) -> None:
            try:
                await (await producer.send(topic, str(n).encode(), partition=n % partitions))
                out.write(f"{n}\n")
            except (KafkaError, OSError):
                pass  # maybe in the topic, maybe not: its offset says

        start, n = time.monotonic(), 0
        while time.monotonic() - start < seconds:
            due = int((time.monotonic() - start) * rate)
            while n < due:
                task = asyncio.create_task(send(n))
                pending.add(task)
                task.add_done_callback(pending.discard)
                n += 1
            await asyncio.sleep(0.05)
        if pending:
            await asyncio.wait(pending, timeout=30)
    await producer.stop()


def _reader(bootstrap: str) -> Any:
    """A consumer for the checker's reads: no group, no commits, patient with tansu on S3."""
    # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=5000, request_timeout_ms=60_000
    )


async def ends(bootstrap: str, topic: str, partitions: int, path: Path, quiet_ms: int = 30_000) -> None:
    """Each partition's end offset now, as a JSON object.

    Some brokers (tansu among them) answer ListOffsets(latest) with a record batch's base offset
    plus one, and may answer a fetch with one record batch, so neither the answer nor the last
    record of one fetch is the end.  The answer only says where to start reading (its offset minus
    one must be there); the consumer then reads on until a fetch of every partition comes back
    empty, and each end is one past the last offset read.  The producer has stopped, so this ends;
    tansu on S3 answers a fetch slowly, hence the long waits (``quiet_ms``: how long a fetch may
    find nothing before the reading is done).
    """
    # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
    from aiokafka import TopicPartition

    consumer = _reader(bootstrap)
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(parts)
        listed = await consumer.end_offsets(parts)
        found = dict.fromkeys(parts, 0)
        for tp in parts:
            consumer.seek(tp, max(listed[tp] - 1, 0))
        while got := await consumer.getmany(*parts, timeout_ms=quiet_ms):
            for tp, records in got.items():
                found[tp] = max(found[tp], records[-1].offset + 1)
        short = {tp.partition: listed[tp] for tp in parts if found[tp] < listed[tp]}
        if short:
            raise RuntimeError(f"partitions {short}: listed end offsets that no fetch reached within {quiet_ms} ms")
    finally:
        await consumer.stop()
    path.write_text(json.dumps({tp.partition: end for tp, end in found.items()}))


async def committed(bootstrap: str, topic: str, partitions: int, group: str, path: Path) -> None:
    """The offsets ``group`` committed, as a JSON object (0 where it committed none)."""
    # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        found = {p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()
    path.write_text(json.dumps({p: offset or 0 for p, offset in found.items()}))


async def present(bootstrap: str, topic: str, ranges: dict[int, list[list[int]]], path: Path) -> None:
    """Which offsets of ``ranges`` (partition: [[from, until], ...]) hold a record, as a JSON object.

    The checker asks only about offsets the output lacks: a few fetches, not a read of the topic.
    """
    # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
    from aiokafka import TopicPartition

    consumer = _reader(bootstrap)
    await consumer.start()
    found: dict[int, list[int]] = {}
    try:
        for partition, spans in ranges.items():
            tp = TopicPartition(topic, int(partition))
            consumer.assign([tp])
            for start, until in spans:
                consumer.seek(tp, start)
                while (position := await consumer.position(tp)) < until:
                    records = (await consumer.getmany(tp, timeout_ms=30_000)).get(tp, [])
                    if not records:
                        raise RuntimeError(f"{tp}: no answer to a fetch from offset {position} within 30 s")
                    found.setdefault(int(partition), []).extend(r.offset for r in records if r.offset < until)
    finally:
        await consumer.stop()
    path.write_text(json.dumps(found))


def _s3():
    # boto3 loads only for the S3 commands
    import boto3

    return boto3.client("s3")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chaos_workload", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("buckets").add_argument("names", nargs="+")
    for name in ("produce", "ends", "committed", "topic"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--bootstrap", required=True)
        cmd.add_argument("--topic", required=True)
        cmd.add_argument("--partitions", type=int, required=True)
        cmd.add_argument("--out", type=Path, required=True)
        if name == "committed":
            cmd.add_argument("--group", required=True)
        if name == "produce":
            cmd.add_argument("--rate", type=float, required=True)
            cmd.add_argument("--seconds", type=float, required=True)
    held = sub.add_parser("present")
    held.add_argument("--bootstrap", required=True)
    held.add_argument("--topic", required=True)
    held.add_argument("--ranges", type=Path, required=True)
    held.add_argument("--out", type=Path, required=True)
    keys = sub.add_parser("keys")
    keys.add_argument("bucket")
    keys.add_argument("prefix")
    args = parser.parse_args(argv)
    if args.command == "buckets":
        for bucket in args.names:
            _s3().create_bucket(Bucket=bucket)
    elif args.command == "topic":
        asyncio.run(create_topic(args.bootstrap, args.partitions, args.topic, timeout=90))
    elif args.command == "produce":
        asyncio.run(produce(args.bootstrap, args.topic, args.partitions, args.rate, args.seconds, args.out))
    elif args.command == "ends":
        asyncio.run(ends(args.bootstrap, args.topic, args.partitions, args.out))
    elif args.command == "present":
        asyncio.run(present(args.bootstrap, args.topic, json.loads(args.ranges.read_text()), args.out))
    elif args.command == "committed":
        asyncio.run(committed(args.bootstrap, args.topic, args.partitions, args.group, args.out))
    else:
        pages = _s3().get_paginator("list_objects_v2").paginate(Bucket=args.bucket, Prefix=args.prefix)
        print(sum(len(page.get("Contents", [])) for page in pages))
    return 0


if __name__ == "__main__":
    sys.exit(main())
