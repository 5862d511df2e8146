"""Helpers of the direct-mode tests: produce to the test broker, run batches like the driver does."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sluice.spark_driver.batch import Batch, BatchInfo
from sluice.spark_driver.direct.source import DirectKafkaSource
from sluice.spark_driver.source import SourceContext

T = TypeVar("T")


def produce(bootstrap: str, topic: str, counts: dict[int, int], *, prefix: str = "v") -> None:
    """Write ``counts[p]`` records to each partition ``p``; values ``<prefix>-<p>-<i>``."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=256 << 10)
        await producer.start()
        try:
            futures = []
            for partition, n in counts.items():
                for i in range(n):
                    futures.append(
                        await producer.send(
                            topic, value=f"{prefix}-{partition}-{i}".encode(), key=str(i).encode(), partition=partition
                        )
                    )
            await producer.flush()
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(run())


def produce_transactions(bootstrap: str, topic: str, transactions: int, size: int, *, abort_every: int = 0) -> None:
    """Write ``transactions`` transactions of ``size`` records each to partition 0 with a real
    transactional producer (Apache Kafka's coordinator writes each one's commit or abort marker, a
    control batch that takes an offset and that consumers skip); every ``abort_every``-th one (1-based,
    0: none) is aborted.  Values are ``x<transaction>-<i>``."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic}")
        await producer.start()
        try:
            for t in range(transactions):
                await producer.begin_transaction()
                sent = [await producer.send(topic, f"x{t}-{i}".encode(), partition=0) for i in range(size)]
                await asyncio.gather(*sent)
                if abort_every and (t + 1) % abort_every == 0:
                    await producer.abort_transaction()
                else:
                    await producer.commit_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())


@contextmanager
def open_transaction(bootstrap: str, topic: str, size: int, **options: Any) -> Iterator[None]:
    """A transaction of ``size`` records (values ``open-<i>``) to partition 0, written and held open
    for the block (the broker's last stable offset stays before it), committed when the block ends.
    Its producer runs on a loop thread of its own, so the block may make blocking calls."""
    from aiokafka import AIOKafkaProducer

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="open-transaction", daemon=True)
    thread.start()
    producer = None

    def run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    async def begin() -> Any:
        made = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"open-{topic}", **options)
        await made.start()
        await made.begin_transaction()
        await asyncio.gather(*[await made.send(topic, f"open-{i}".encode(), partition=0) for i in range(size)])
        return made

    try:
        producer = run(begin())
        yield
        run(producer.commit_transaction())
    finally:
        if producer is not None:
            run(producer.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def delete_topic(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()

    asyncio.run(run())


def complete(source: DirectKafkaSource, batch: Batch) -> list:
    """Run ``batch`` (collect its records in Spark tasks) and acknowledge it, as the driver does."""
    start = int(time.time() * 1000)
    records = batch.rdd.collect()
    info = BatchInfo(
        batch.time_ms,
        batch.num_records,
        submission_time_ms=start,
        processing_start_ms=start,
        processing_end_ms=int(time.time() * 1000),
        status="succeeded",
    )
    source.on_batch_completed(batch, info)
    return records


@pytest.fixture
def make_source(spark, kafka_broker, tmp_path: Path) -> Iterator[Callable[..., DirectKafkaSource]]:
    """``make_source(topic, batch_interval_ms=1000, **kwargs)``: a started source; stopped after."""
    started: list[DirectKafkaSource] = []

    def make(
        topic: str,
        batch_interval_ms: int = 1000,
        checkpoint_dir: Path | None = None,
        options: dict | None = None,
        **kwargs,
    ) -> DirectKafkaSource:
        kwargs.setdefault("group_id", f"g-{topic}")
        source = DirectKafkaSource(
            kafka_broker.bootstrap,
            topic,
            checkpoint_dir=str(checkpoint_dir or tmp_path / "ckpt"),
            retry_backoff_ms=20,
            **kwargs,
        )
        started.append(source)
        source.start(SourceContext(spark, batch_interval_ms, options=options or {}))
        return source

    yield make
    for source in started:
        source.stop()


def counts(batch: Batch) -> dict[int, int]:
    return {r.partition: r.count for r in batch.offset_ranges}
