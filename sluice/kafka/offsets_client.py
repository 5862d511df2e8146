"""The driver's Kafka client in direct mode: partitions, offsets and the group's commits.

Spark's ``DirectKafkaInputDStream`` keeps one consumer on the driver that never hands records to
anyone: it only learns partitions, seeks to the end to read the latest offsets and commits.  This
is the same with aiokafka.  The driver's threads are synchronous (PySpark), so the consumer lives
on a private event loop in a daemon thread and every call is a blocking hop onto that loop.

The latest offsets are Kafka's ListOffsets(latest) under the isolation level the client settings
give (``isolation_level``, aiokafka's consumer sends it with the request): under
``read_uncommitted`` the high watermark, under ``read_committed`` the last stable offset (LSO), the
first offset of the oldest transaction still open.  A batch therefore never reaches past the LSO
into records a ``read_committed`` task could not yet read (Spark's Kafka source plans with the
same answer, from the Java consumer's ``endOffsets`` under the same setting).  Past the LSO the log
may hold more: :meth:`KafkaOffsets.open_transaction_records` is how many (the high watermark,
asked for under ``read_uncommitted``, minus the LSO), what an operator looks at to see a
transaction held open.

A lookup by timestamp checks the broker's answer against the records with fetches of Sluice's own
(:class:`~sluice.kafka.fetcher.RecordBatchFetcher`, on a group-less consumer's connections, its
partitions paused) decoded by the receiver path's decoder, so a record aiokafka's consumer refuses
(a header key that is not UTF-8) does not stop the stream at its driver.

Every partition is assigned to the consumer *and paused*: the assignment is what aiokafka needs
to commit a partition's offset to the group, and pausing keeps its fetcher from downloading
records the driver never reads (Spark's "paranoid poll" guards against the same thing).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from sluice.errors import InvalidArgument, SluiceError
from sluice.kafka.authorization import authorization_error, principal_of
from sluice.kafka.bad_records import BadRecord
from sluice.kafka.client_settings import consumer_options
from sluice.kafka.offsets import TopicPartition
from sluice.kafka.record_batches import decode_batches
from sluice.kafka.time_search import first_offset_at
from sluice.kafka.topics import TopicSelection
from sluice.kafka.transactions import committed, fetched_until

log = logging.getLogger(__name__)
T = TypeVar("T")


class KafkaOffsetsError(SluiceError, RuntimeError):
    """The brokers did not answer a direct-mode request; the message names it and the error."""

    retriable = True


class KafkaOffsetsRefused(KafkaOffsetsError):
    """Kafka's authorizer refused a direct-mode request; the message names the resource and the operation to grant.

    Raised at once, without the retries an unanswered request gets: each would be refused alike.
    """

    retriable = False


class KafkaOffsets:
    """Blocking facade over an aiokafka consumer running on its own loop thread.

    ``max_retries`` is ``kafka.max_retries`` (Spark's ``spark.streaming.kafka.maxRetries``):
    a failed request is tried again that many times, waiting ``retry_backoff_ms`` (doubling)
    between attempts, before the broker's error is raised to fail the batch.  ``group_id`` None:
    no consumer group, for a reader of offsets only (it has nothing committed and commits nothing).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topics: Iterable[str] | TopicSelection,
        group_id: str | None,
        *,
        client_options: Mapping[str, Any] | None = None,
        max_retries: int = 1,
        retry_backoff_ms: int = 200,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        if isinstance(topics, TopicSelection):
            self.selection = topics
        else:
            names = tuple(dict.fromkeys(t.strip() for t in topics if t.strip()))
            if not names:
                raise InvalidArgument("kafka.topic names no topic: give one or more, comma-separated")
            self.selection = TopicSelection(topics=names)
        self.group_id = group_id
        self.client_options = consumer_options(client_options or {})
        self.max_retries = max_retries
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_s = request_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._consumer: Any = None
        self._reader: Any = None  # group-less, for reading single records (offsets_for_times' check)
        self._reader_fetcher: Any = None  # a RecordBatchFetcher on the reader, once started
        self._assigned: set[TopicPartition] = set()
        self._missing: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop thread and connect to the brokers (retried like any request)."""
        if self._loop is not None:
            return
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="sluice-direct-kafka", daemon=True)
        self._thread.start()
        ready.wait()
        self._loop = loop
        self._call(self._retrying("connecting", self._connect))

    async def _connect(self) -> None:
        # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
        from aiokafka import AIOKafkaConsumer

        if self._consumer is not None:
            return
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **self.client_options,
        )
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer

    async def _record_reader(self) -> Any:
        """The fetcher that reads single records, on a group-less consumer's connections, started on
        first use: only a lookup by timestamp needs it."""
        # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
        from aiokafka import AIOKafkaConsumer

        # its fetches are Sluice's own: aiokafka's consumer refuses a whole fetch on one record it
        # cannot parse (a header key that is not UTF-8), which would stop the stream here
        from sluice.kafka.fetcher import RecordBatchFetcher  # with aiokafka, as the consumers

        if self._reader_fetcher is None:
            options = {"fetch_max_wait_ms": 20, "max_partition_fetch_bytes": 64 << 10, **self.client_options}
            reader = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap_servers,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="latest",
                **options,
            )
            try:
                await reader.start()
            except BaseException:
                await reader.stop()
                raise
            self._reader = reader
            self._reader_fetcher = RecordBatchFetcher(reader, options)
        return self._reader

    def close(self) -> None:
        """Stop the consumer and the loop thread; safe when never started or called twice."""
        loop, self._loop = self._loop, None
        if loop is None:
            return

        async def stop() -> None:
            for name in ("_reader", "_consumer"):
                consumer = getattr(self, name)
                if consumer is not None:
                    setattr(self, name, None)
                    await consumer.stop()

        try:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(self.request_timeout_s)
        except Exception as exc:  # noqa: BLE001 - closing must not hide the error that made us close
            log.warning("direct kafka: stopping the driver's consumer failed: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(self.request_timeout_s)
        loop.close()

    # -- requests --------------------------------------------------------------------------------

    def partitions(self) -> list[TopicPartition]:
        """Every partition of the topics, from fresh metadata (picks up partitions added live)."""
        return self._call(self._retrying(f"partitions of {self.selection.describe()}", self._partitions))

    def latest_offsets(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """The end offset of each partition (all partitions of the topics when not given)."""
        wanted = None if partitions is None else list(partitions)

        async def latest() -> dict[TopicPartition, int]:
            tps = await self._partitions() if wanted is None else wanted
            return await self._offsets(tps, end=True)

        return self._call(self._retrying(f"latest offsets of {self.selection.describe()}", latest))

    def open_transaction_records(self, ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Under ``read_committed``: the records of each partition past ``ends`` (its last stable
        offsets, from :meth:`latest_offsets`) up to its high watermark, held back by transactions
        still open.  Empty under ``read_uncommitted``, whose ends are the high watermarks."""
        if self.client_options.get("isolation_level") != "read_committed" or not ends:
            return {}
        wanted = dict(ends)

        async def held() -> dict[TopicPartition, int]:
            # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
            from aiokafka import TopicPartition as KafkaTP

            from sluice.kafka.aiokafka_internals import high_watermarks

            highs = await high_watermarks(self._consumer, [KafkaTP(*tp) for tp in wanted])
            return {(k.topic, k.partition): max(0, high - wanted[(k.topic, k.partition)]) for k, high in highs.items()}

        return self._call(self._retrying("high watermarks", held))

    def earliest_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The first offset still in the log of each partition."""
        tps = list(partitions)
        return self._call(self._retrying("earliest offsets", lambda: self._offsets(tps, end=False)))

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """Each partition's first offset whose record timestamp is at or after the one given (epoch
        ms), None where no record is that late (Kafka's ListOffsets by timestamp)."""
        wanted = dict(timestamps)

        async def lookup() -> dict[TopicPartition, int | None]:
            # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
            from aiokafka import TopicPartition as KafkaTP

            if not wanted:
                return {}
            answer = await self._consumer.offsets_for_times({KafkaTP(*tp): ts for tp, ts in wanted.items()})
            found: dict[TopicPartition, int | None] = {}
            for ktp, hit in answer.items():
                tp = (ktp.topic, ktp.partition)
                found[tp] = None if hit is None else await self._time_offset(ktp, wanted[tp], hit.offset)
            return found

        return self._call(self._retrying("offsets by timestamp", lookup))

    async def _time_offset(self, ktp: Any, timestamp: int, answer: int) -> int | None:
        """``answer`` (the broker's first offset at or after ``timestamp``) checked against the
        records (:func:`~sluice.kafka.time_search.first_offset_at`)."""
        tp = (ktp.topic, ktp.partition)
        low = (await self._offsets([tp], end=False))[tp]
        end = (await self._offsets([tp], end=True))[tp]
        reader = await self._record_reader()
        previous = reader.assignment()
        reader.assign([ktp])  # for its metadata; paused, its own fetcher reads nothing
        reader.pause(ktp)
        try:
            record_at = lambda offset: self._record_at(ktp, offset)  # noqa: E731
            return await first_offset_at(record_at, low, end, timestamp, answer)
        finally:
            if previous:
                reader.assign(list(previous))
                reader.pause(*previous)

    async def _record_at(self, ktp: Any, offset: int) -> tuple[int, int] | None:
        """(offset, time) of the first record at or after ``offset``, None when there is none; a
        record that cannot be decoded counts by its batch's first timestamp."""
        fetcher = self._reader_fetcher
        assert fetcher is not None
        deadline = asyncio.get_running_loop().time() + min(2.0, self.request_timeout_s)
        at = offset
        while asyncio.get_running_loop().time() < deadline:
            fetched = await fetcher.fetch({ktp: at})
            data = fetched.data.get(ktp, b"")
            until = fetched_until(data)
            if until is None or until <= at:
                if fetched.out_of_range or fetched.failed:
                    await asyncio.sleep(fetcher.retry_backoff_s)
                continue
            bad: list[BadRecord] = []
            kept = committed(data, fetched.aborted[ktp]) if fetched.aborted.get(ktp) else data
            found = [(r.offset, r.timestamp_ms) for r in decode_batches(kept, ktp.topic, ktp.partition, at, until, bad)]
            found += [(b.offset, b.timestamp_ms) for b in bad]
            if found:
                return min(found)
            at = until  # control batches or aborted ones only: the next record is further on
        return None

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offset of each partition that has one."""
        tps = list(partitions)

        async def committed() -> dict[TopicPartition, int]:
            # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
            from aiokafka import TopicPartition as KafkaTP

            found: dict[TopicPartition, int] = {}
            for tp in tps:
                offset = await self._consumer.committed(KafkaTP(*tp))
                if offset is not None and offset >= 0:
                    found[tp] = offset
            return found

        return self._call(self._retrying(f"committed offsets of group {self.group_id}", committed))

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (the next offset to read per partition) to the group."""
        wanted = dict(offsets)
        if not wanted:
            return

        async def commit() -> None:
            # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
            from aiokafka import TopicPartition as KafkaTP

            if not set(wanted) <= self._assigned:
                tps = sorted(self._assigned | set(wanted))
                self._consumer.assign([KafkaTP(*tp) for tp in tps])
                self._consumer.pause(*(KafkaTP(*tp) for tp in tps))
                self._assigned = set(tps)
            await self._consumer.commit({KafkaTP(*tp): offset for tp, offset in wanted.items()})

        self._call(self._retrying(f"committing offsets of group {self.group_id}", commit))

    # -- internals -------------------------------------------------------------------------------

    async def _partitions(self) -> list[TopicPartition]:
        # aiokafka loads with the first call to the brokers, as the consumer does
        from sluice.kafka.aiokafka_internals import fetch_all_metadata

        cluster = await fetch_all_metadata(self._consumer)  # the consumer's own metadata stays as it is
        topics = {t: cluster.partitions_for_topic(t) or () for t in cluster.topics()}
        found = self.selection.select(topics)
        missing = set(self.selection.missing(topics))
        if missing:
            await self._check_described(sorted(missing))
        if missing != self._missing:  # as Spark's Subscribe: a topic that does not exist yet has no partitions
            if missing:
                log.warning(
                    "direct kafka: topic(s) %s do not exist on %s (yet); reading the others",
                    ", ".join(sorted(missing)),
                    self.bootstrap_servers,
                )
            self._missing = missing
        return found

    async def _check_described(self, topics: list[str]) -> None:
        """Raise Kafka's refusal for those of ``topics`` the principal may not ``DESCRIBE``: the
        listing of every topic leaves them out as if they did not exist, and reading on would wait
        for them for ever (a topic that really does not exist yet is waited for, as Spark does)."""
        # aiokafka loads with the first call to the brokers, as the consumer does
        from aiokafka.errors import TopicAuthorizationFailedError

        from sluice.kafka.aiokafka_internals import topic_errors

        errors = await topic_errors(self._consumer, topics)
        refused = [t for t, code in errors.items() if code == TopicAuthorizationFailedError.errno]
        if refused:
            raise TopicAuthorizationFailedError(sorted(refused))

    async def _offsets(self, tps: list[TopicPartition], *, end: bool) -> dict[TopicPartition, int]:
        # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
        from aiokafka import TopicPartition as KafkaTP

        if not tps:
            return {}
        ask = self._consumer.end_offsets if end else self._consumer.beginning_offsets
        answer = await ask([KafkaTP(*tp) for tp in tps])
        return {(tp.topic, tp.partition): int(offset) for tp, offset in answer.items()}

    async def _retrying(self, what: str, request: Callable[[], Awaitable[T]]) -> T:
        """Run ``request`` with up to ``max_retries`` retries; raise the broker's last error."""
        # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
        from aiokafka.errors import KafkaError

        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return await asyncio.wait_for(request(), self.request_timeout_s)
            except (TimeoutError, KafkaOffsetsError, KafkaError, OSError) as exc:
                topics = self.selection.topics or tuple(t for t, _ in self.selection.partitions)
                principal = principal_of(self.client_options)
                refused = authorization_error(exc, group_id=self.group_id, topics=topics, principal=principal)
                if refused is not None:
                    raise KafkaOffsetsRefused(f"{what} from {self.bootstrap_servers}: {refused}") from None
                detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if attempt == attempts:
                    if isinstance(exc, KafkaOffsetsError):
                        raise
                    raise KafkaOffsetsError(
                        f"{what} from {self.bootstrap_servers} failed after {attempts} attempt(s): {detail}"
                    ) from exc
            delay = self.retry_backoff_ms / 1000 * 2 ** (attempt - 1)
            log.warning(
                "direct kafka: %s failed (attempt %d of %d), retrying in %.1fs: %s",
                what,
                attempt,
                attempts,
                delay,
                detail,
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            raise KafkaOffsetsError("the direct-mode Kafka client is not started")
        per_try = self.request_timeout_s + self.retry_backoff_ms / 1000 * 2**self.max_retries
        timeout = per_try * (self.max_retries + 2)
        started = time.monotonic()
        try:
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)
        except TimeoutError:
            raise KafkaOffsetsError(
                f"request to {self.bootstrap_servers} took over {time.monotonic() - started:.0f}s"
            ) from None
