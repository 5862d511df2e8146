"""Reading one offset range inside a Spark task (Spark's ``KafkaRDD.compute``).

Each partition of a direct-mode batch RDD is one Kafka partition's ``[from, until)``.  The task
runs in a PySpark worker, which has no event loop of its own, so the reader drives an aiokafka
consumer on a loop of its own, one fetch at a time, yielding records between fetches: memory stays
bounded by one fetch (``max_partition_fetch_bytes``), whatever the range's size.

The consumer is kept for its connections and metadata only (the range's partition assigned and
paused, so it fetches nothing itself): the fetches are Sluice's own
(:class:`~sluice.kafka.fetcher.RecordBatchFetcher`) and their batches are decoded record by record
by the receiver path's decoder (:func:`~sluice.kafka.record_batches.decode_batches`).  aiokafka's
``getmany`` refuses a whole fetch on one record it cannot parse (a header key that is not UTF-8,
which brokers keep and Java clients read): here such a key stays ``bytes`` and a record that
cannot be decoded goes by the bad-record policy (``driver.bad_records``, the structured source's
``badRecords``: :class:`~sluice.storage.dead_letters.BadRecordHandling`), once per range.  Under
``isolation_level = read_committed`` the batches of aborted transactions are left out as Kafka's
consumer leaves them out (:mod:`sluice.kafka.transactions`).

A PySpark worker runs one task at a time and is reused for the next (``spark.python.worker.reuse``),
so :class:`ConsumerCache` keeps the worker's consumers between tasks, as Spark keeps its executors'
(``spark.streaming.kafka.consumer.cache.*``): a task then pays an ``assign`` and a ``seek``, not a
bootstrap, a metadata round trip and a close.  A consumer that sat idle may have gone stale: the
first failure of a reused one is retried once on a new consumer from the offset it stopped at.

Gaps are normal (compacted topics, transaction markers): the range is done once the fetched
batches reach ``until``, not when ``until - from`` records were seen.  A range that stops
making progress for ``poll_timeout_ms`` fails the task with an error that names the range
(Spark's ``spark.streaming.kafka.consumer.poll.ms``), and offsets that are no longer in the log
fail it with the broker's error instead of silently skipping data.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import Any, TypedDict, Unpack

from sluice.block_info import OffsetRange
from sluice.clock import Clock, SystemClock
from sluice.errors import SluiceError
from sluice.kafka.bad_records import BadRecord, BadRecordPolicy
from sluice.kafka.client_settings import consumer_options
from sluice.kafka.record_batches import BatchFormatError, CodecUnavailable, decode_batches
from sluice.kafka.transactions import committed, fetched_until
from sluice.records import Record
from sluice.spark_driver.batch import Batch
from sluice.storage.dead_letters import BadRecordHandling

DEFAULT_CHUNK = 2000
DEFAULT_POLL_TIMEOUT_MS = 60_000
CACHE_CAPACITY = 8  # consumers kept per worker process, one per client configuration
CACHE_IDLE_TIMEOUT_MS = 300_000  # Spark's spark.kafka.consumer.cache.timeout

log = logging.getLogger(__name__)


class RangeReadError(SluiceError, RuntimeError):
    """An offset range could not be read completely; the message names it."""

    retriable = True


class ConsumerCache:
    """This process's event loop and its idle consumers, one per client configuration.

    ``take`` hands a consumer out (a cached one, else a new one) and ``give_back`` keeps it for the
    next task; a consumer in use is never in the cache, so two ranges read in one task (a zip of
    two RDDs) get one each.  The least recently used beyond ``capacity`` and any idle longer than
    ``idle_timeout_ms`` on ``clock`` are closed.  After a fork the parent's loop and consumers are left alone.
    """

    def __init__(
        self, capacity: int = CACHE_CAPACITY, idle_timeout_ms: float = CACHE_IDLE_TIMEOUT_MS, clock: Clock | None = None
    ) -> None:
        self.capacity = capacity
        self.idle_timeout_ms = idle_timeout_ms
        self.clock = clock or SystemClock()
        self._pid = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: OrderedDict[tuple, tuple[Any, float]] = OrderedDict()
        self.created = 0  # consumers started by this process (the tests count reuse with it)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._pid != os.getpid():
            self._pid, self._loop, self._idle = os.getpid(), asyncio.new_event_loop(), OrderedDict()
        return self._loop

    def take(self, bootstrap_servers: str, client_options: Mapping[str, Any]) -> tuple[Any, bool]:
        """(a started consumer with nothing assigned, whether it was cached)."""
        self._evict_idle()
        key = _cache_key(bootstrap_servers, client_options)
        if key in self._idle:
            consumer, _ = self._idle.pop(key)
            return consumer, True
        return self.loop.run_until_complete(self._start(bootstrap_servers, client_options)), False

    def give_back(self, bootstrap_servers: str, client_options: Mapping[str, Any], consumer: Any) -> None:
        run_sync(self.loop, consumer.unsubscribe)  # no prefetching of a finished range meanwhile
        key = _cache_key(bootstrap_servers, client_options)
        if key in self._idle:  # another task of this process gave one back first: keep one
            self.discard(consumer)
            return
        self._idle[key] = (consumer, self.clock.now_ms())
        while len(self._idle) > self.capacity:
            self.discard(self._idle.popitem(last=False)[1][0])

    def discard(self, consumer: Any) -> None:
        try:
            self.loop.run_until_complete(consumer.stop())
        except Exception as exc:  # noqa: BLE001 - closing a broken consumer loses nothing: say it, go on
            log.warning("closing a Kafka consumer failed: %s: %s", type(exc).__name__, exc)

    def close(self) -> None:
        while self._idle:
            self.discard(self._idle.popitem()[1][0])

    def _evict_idle(self) -> None:
        now = self.clock.now_ms()
        for key in [k for k, (_, used) in self._idle.items() if now - used > self.idle_timeout_ms]:
            self.discard(self._idle.pop(key)[0])

    async def _start(self, bootstrap_servers: str, client_options: Mapping[str, Any]) -> Any:
        # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            **{
                "max_partition_fetch_bytes": 1 << 20,
                **consumer_options(client_options),
                "bootstrap_servers": bootstrap_servers,
                "group_id": None,
                "enable_auto_commit": False,
                "auto_offset_reset": "none",
            }
        )
        await consumer.start()
        self.created += 1
        return consumer


def run_sync(loop: asyncio.AbstractEventLoop, call: Callable[[], Any]) -> Any:
    """Run a synchronous aiokafka call on ``loop`` (assign and seek make futures of the running loop)."""

    async def on_loop() -> Any:
        return call()

    return loop.run_until_complete(on_loop())


def _cache_key(bootstrap_servers: str, client_options: Mapping[str, Any]) -> tuple:
    return bootstrap_servers, tuple(sorted((k, repr(v)) for k, v in client_options.items()))


CONSUMERS = ConsumerCache()
atexit.register(CONSUMERS.close)  # in-process use; a PySpark worker leaves by os._exit


class ReadOptions(TypedDict, total=False):
    """:func:`read_range_chunks`'s keywords (its defaults apply to those left out), which
    :func:`read_range` passes on as they are."""

    client_options: Mapping[str, Any] | None
    chunk: int
    poll_timeout_ms: int
    cache: ConsumerCache
    bad_records: BadRecordHandling | None
    stream_id: int


def read_range(bootstrap_servers: str, offset_range: OffsetRange, **options: Unpack[ReadOptions]) -> Iterator[Any]:
    """Yield ``sluice.records.Record`` for every record of ``offset_range``, in offset order;
    ``bad_records`` (an option): what becomes of a record that cannot be decoded (None: the range
    fails naming it)."""
    for records in read_range_chunks(bootstrap_servers, offset_range, **options):
        yield from records


def read_range_chunks(
    bootstrap_servers: str,
    offset_range: OffsetRange,
    *,
    client_options: Mapping[str, Any] | None = None,
    chunk: int = DEFAULT_CHUNK,
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS,
    cache: ConsumerCache = CONSUMERS,
    bad_records: BadRecordHandling | None = None,
    stream_id: int = 0,
) -> Iterator[list[Any]]:
    """:func:`read_range`'s records as the lists they are read in (at most ``chunk`` each, none
    empty), for a caller that converts a chunk at once (``sluice-kafka``'s Arrow batches).

    The records of the range that cannot be decoded go to ``bad_records`` once the range is read
    (one log line, one dead-letter file ``direct-<topic>-<partition>-<from>-<until>`` of
    ``stream_id``); under ``fail`` (or None) the first one fails the range at once."""
    if offset_range.count == 0:
        return
    handling = bad_records or BadRecordHandling()
    options = dict(client_options or {})
    consumer, reused = cache.take(bootstrap_servers, options)
    position = [offset_range.from_offset]  # where the next fetch starts, moved by _chunks
    bad: list[BadRecord] = []
    try:
        while True:
            try:
                for records in _chunks(cache.loop, consumer, offset_range, position, options, poll_timeout_ms, bad):
                    if bad and handling.policy is BadRecordPolicy.FAIL:
                        handling.handle(bad, stream_id, "", f"in {_name(offset_range)}")
                    for at in range(0, len(records), chunk):
                        yield records[at : at + chunk]
                break
            except RangeReadError:
                if not reused:
                    raise
                log.warning("a cached Kafka consumer failed on %s; retrying on a new one", _name(offset_range))
                cache.discard(consumer)
                consumer = None
                consumer, reused = cache.take(bootstrap_servers, options)
    except BaseException:
        if consumer is not None:
            cache.discard(consumer)
        raise
    cache.give_back(bootstrap_servers, options, consumer)
    r = offset_range
    name = f"direct-{r.topic}-{r.partition}-{r.from_offset}-{r.until_offset}"
    handling.handle(bad, stream_id, name, f"in {_name(r)}")


def _chunks(
    loop: asyncio.AbstractEventLoop,
    consumer: Any,
    r: OffsetRange,
    position: list[int],
    options: Mapping[str, Any],
    poll_timeout_ms: int,
    bad: list[BadRecord],
) -> Iterator[list[Record]]:
    """The records of ``[position[0], r.until)``, one list per fetch that brought any, gaps
    skipped; ``position[0]`` moves past each fetch's batches, and the records of the range that
    cannot be decoded are appended to ``bad``."""
    # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
    from aiokafka import TopicPartition

    from sluice.kafka.fetcher import RecordBatchFetcher

    tp = TopicPartition(r.topic, r.partition)

    def assign_paused() -> None:
        consumer.assign([tp])  # its metadata then covers the topic
        consumer.pause(tp)  # and its own fetcher leaves the partition to ours

    run_sync(loop, assign_paused)
    try:  # a consumer that was stopped (or broke) while cached refuses this at once; paused, it returns nothing
        loop.run_until_complete(consumer.getmany(tp, timeout_ms=0))
    except Exception as exc:
        raise RangeReadError(f"reading {_name(r)} failed at offset {position[0]}: {type(exc).__name__}: {exc}") from exc
    fetcher = RecordBatchFetcher(consumer, options)
    last_progress = time.monotonic()
    while position[0] < r.until_offset:
        at = position[0]
        fetched = loop.run_until_complete(fetcher.fetch({tp: at}))
        if tp in fetched.out_of_range:
            raise RangeReadError(f"reading {_name(r)} failed at offset {at}: OffsetOutOfRangeError: not in the log")
        try:
            records, until = _decoded(fetched.data.get(tp, b""), fetched.aborted.get(tp), r, at, bad)
        except CodecUnavailable:
            raise
        except BatchFormatError as exc:  # the response's bytes, not a record: a broker's fault, Spark retries the task
            raise RangeReadError(f"reading {_name(r)} failed at offset {at}: {exc}") from exc
        if until > at:
            position[0] = until
            last_progress = time.monotonic()
            if records:
                yield records
            continue
        if fetched.failed:
            loop.run_until_complete(asyncio.sleep(fetcher.retry_backoff_s))  # a retry's back-off
        if (time.monotonic() - last_progress) * 1000 > poll_timeout_ms:
            raise RangeReadError(
                f"reading {_name(r)}: no record after offset {at} "
                f"for {poll_timeout_ms} ms; is the range still in the log?"
            )


def _decoded(
    data: bytes | memoryview, aborted: list[tuple[int, int]] | None, r: OffsetRange, at: int, bad: list[BadRecord]
) -> tuple[list[Record], int]:
    """One fetch's records of ``[at, r.until)`` (those of aborted transactions left out when the
    fetch read committed) and the offset the next fetch starts at; bad records go to ``bad``."""
    until = fetched_until(data)
    if until is None or until <= at:
        return [], at
    kept = committed(data, aborted) if aborted else data
    return decode_batches(kept, r.topic, r.partition, at, r.until_offset, bad), until


def read_partition(
    bootstrap_servers: str,
    client_options: Mapping[str, Any],
    chunk: int,
    poll_timeout_ms: int,
    bad_records: BadRecordHandling | None,
    stream_id: int,
    wires: Iterable[list],
) -> Iterator[Any]:
    """``mapPartitions`` body: the partition holds one range's wire form; read it.

    A module-level function bound with ``functools.partial``, so Spark pickles it by reference.
    """
    for wire in wires:
        yield from read_range(
            bootstrap_servers,
            OffsetRange.from_wire(wire),
            client_options=client_options,
            chunk=chunk,
            poll_timeout_ms=poll_timeout_ms,
            bad_records=bad_records,
            stream_id=stream_id,
        )


def _name(r: OffsetRange) -> str:
    return f"{r.topic}/{r.partition} [{r.from_offset}, {r.until_offset})"


def kafka_rdd(
    sc: Any,
    ranges: Iterable[OffsetRange],
    bootstrap_servers: str,
    *,
    client_options: Mapping[str, Any] | None = None,
    chunk: int = DEFAULT_CHUNK,
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS,
    bad_records: BadRecordHandling | None = None,
    stream_id: int = 0,
) -> Any:
    """Spark's ``KafkaRDD``: one partition per offset range, each task reading its range
    (``bad_records``: what a task does with a record that cannot be decoded; None: fail).

    ``parallelize`` with as many slices as elements gives exactly one range per partition, so
    Spark schedules (and retries) each Kafka partition's read as its own task.
    """

    wires = [r.to_wire() for r in ranges]
    if not wires:
        return sc.emptyRDD()
    options = dict(client_options or {})
    body = partial(read_partition, bootstrap_servers, options, chunk, poll_timeout_ms, bad_records, stream_id)
    return sc.parallelize(wires, len(wires)).mapPartitions(body, preservesPartitioning=True)


def kafka_batch(
    spark: Any,
    batch_time_ms: int,
    ranges: tuple[OffsetRange, ...],
    bootstrap_servers: str,
    stream_id: int,
    **read: Any,
) -> Batch:
    """Direct mode's :class:`~sluice.spark_driver.batch.Batch` of ``ranges`` (``read``: :func:`kafka_rdd`'s
    keywords), its metadata the ranges as Spark's direct stream shows them on its batch page."""

    count = sum(r.count for r in ranges)
    return Batch(
        time_ms=batch_time_ms,
        rdd=kafka_rdd(spark.sparkContext, ranges, bootstrap_servers, stream_id=stream_id, **read),
        spark=spark,
        num_records=count,
        offset_ranges=ranges,
        stream_records={stream_id: count},
        metadata={
            "offsets": [r.to_wire() for r in ranges],
            "Description": "\n".join(
                f"topic: {r.topic}\tpartition: {r.partition}\toffsets: {r.from_offset} to {r.until_offset}"
                for r in ranges
                if r.count
            ),
        },
    )
