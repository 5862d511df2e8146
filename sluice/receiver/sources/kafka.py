"""``KafkaReceiver``: a consumer-group member that stores records in blocks and commits after the ack.

Offsets are committed by hand and only for blocks the tracker has durably accepted
(:meth:`KafkaReceiver.on_block_acknowledged`), so a receiver that dies loses nothing: its successor
starts at the last committed offset and the tracker trims whatever was already added, which makes
every record enter exactly one accepted block.

On a rebalance aiokafka awaits ``on_partitions_revoked`` before the partitions move: the receiver
stops storing records of those partitions, cuts a block of what it holds and waits until every
block it holds is acknowledged and its offsets committed, so the next owner starts right after.

The consumer keeps the group, the assignment and the commits; the records of the owned partitions
are fetched by the receiver's own requests (:class:`RecordBatchFetcher`, those partitions paused
in the consumer) and stored as the record batches the broker sent, which readers decode record by
record (``driver.bad_records``).  Under ``isolation_level = read_committed`` those requests read
committed and the batches of the aborted transactions the broker lists are left out before they
are stored (:mod:`sluice.kafka.transactions`, as Kafka's consumer leaves them out).  Only with
deserializers (``key_deserializer``, ``value_deserializer``, which need records) does the receiver
take the consumer's ``getmany`` records and encode them into the block format's columns; aiokafka
refuses a whole fetch there on a record it cannot parse.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from sluice.block_info import OffsetRange
from sluice.errors import InvalidArgument
from sluice.kafka.authorization import KafkaAuthorizationError, authorization_error, principal_of
from sluice.kafka.client_settings import consumer_options
from sluice.kafka.fetcher import FetchRound, RecordBatchFetcher
from sluice.kafka.record_batches import BatchFormatError, batch_pieces
from sluice.kafka.topics import subscribe_pattern
from sluice.kafka.transactions import committed, fetched_until
from sluice.receiver.rate_limiter import limiter_pieces
from sluice.receiver.receiver import Receiver
from sluice.receiver.sources.kafka_losses import LogLosses
from sluice.receiver.sources.kafka_progress import PartitionProgress
from sluice.redaction import redacted
from sluice.storage.block_format import encode_kafka_piece

log = logging.getLogger(__name__)

_RECORD_OPTIONS = ("key_deserializer", "value_deserializer")  # they need records, so getmany
_ALIVE_EVERY_S = 1.0  # how often the batches mode calls getmany (see KafkaReceiver._poll_alive)


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, receiver: KafkaReceiver) -> None:
        self.receiver = receiver

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.receiver.partitions_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.receiver.partitions_assigned(set(assigned))


class KafkaReceiver(Receiver):
    """A member of a Kafka consumer group; commits offsets only after the tracker acknowledged their block.

    :param bootstrap_servers: the brokers, ``host:port[,host:port...]``.
    :param topics: the topics to subscribe to (a comma-separated string or a list).
    :param group_id: the consumer group the stream's receivers share.
    :param auto_offset_reset: where a group without commits starts: ``earliest`` or ``latest``.
    :param client: extra aiokafka settings (TLS, SASL), see :func:`~sluice.kafka.client_settings.consumer_options`.
    :param max_poll_records: with deserializers, the most records one ``getmany`` returns.
        Large: aiokafka leaves a partition whose fetched records are not all taken out of its next
        fetch request, so taking a fraction of each fetch staggers the partitions and costs a fetch
        round trip per fraction.
    :param poll_timeout_ms: how long one ``getmany`` waits for records.
    :param topic_pattern: Spark's ``subscribePattern``: every topic whose whole name matches this
        regular expression, those created later too (the group's rebalances bring them); replaces
        ``topics``.
    :param fail_on_data_loss: Spark's ``failOnDataLoss``: a position the log no longer holds
        (retention passed it, the topic was recreated), or offsets a fetch skips, stop the
        receiver with the error instead of a reset by ``auto_offset_reset`` or a warning.
    :param gap_wait_ms: how long offsets a fetch skips at the position are fetched again before
        they are taken as missing (:mod:`~sluice.kafka.gaps`).
    :param static_membership: join as a static member (KIP-345), ``group_instance_id`` being the
        receiver id: a receiver that restarts within ``session_timeout_ms`` takes its place and
        its partitions back without a rebalance, so the other members keep theirs.  A static
        member does not leave the group when it stops: its partitions wait for the session timeout
        before they move.  A ``group_instance_id`` in ``client`` wins.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topics: str | Iterable[str],
        group_id: str,
        *,
        auto_offset_reset: str = "earliest",
        client: dict[str, Any] | None = None,
        max_poll_records: int = 100_000,
        poll_timeout_ms: int = 200,
        topic_pattern: str = "",
        fail_on_data_loss: bool = False,
        gap_wait_ms: int = 0,
        static_membership: bool = False,
    ) -> None:
        super().__init__()
        self.bootstrap_servers = bootstrap_servers
        self.topics = [t.strip() for t in topics.split(",")] if isinstance(topics, str) else list(topics)
        self.topic_pattern = subscribe_pattern(topic_pattern).pattern if topic_pattern else None
        if self.topic_pattern is None and (not self.topics or not all(self.topics)):
            raise InvalidArgument(f"kafka.topic {topics!r} names no topic")
        self._losses = LogLosses(self, fail_on_data_loss, gap_wait_ms)
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self._client_given = dict(client or {})  # as configured: what the start's log line shows
        self.client_options = consumer_options(self._client_given)
        self.max_poll_records = max_poll_records
        self.poll_timeout_ms = poll_timeout_ms
        self.static_membership = static_membership
        self.consumer: AIOKafkaConsumer | None = None
        self._assigned: set[TopicPartition] = set()
        self._progress = PartitionProgress()
        self._committed: dict[TopicPartition, int] = {}
        self._revoking: set[TopicPartition] = set()
        self._storing = asyncio.Lock()  # held while records are on their way into the buffer
        self._alive_at = 0.0  # when the batches mode last called getmany

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> KafkaReceiver:
        """The ``kafka`` source's factory: the receiver the ``[kafka]`` section describes."""
        return cls(
            options["bootstrap_servers"],
            options["topic"],
            options["group_id"],
            auto_offset_reset=options["auto_offset_reset"],
            client=options["client"],
            topic_pattern=options.get("topic_pattern", ""),
            fail_on_data_loss=options.get("fail_on_data_loss", False),
            gap_wait_ms=options.get("gap_wait_ms", 0),
            static_membership=options.get("static_membership", False),
        )

    # -- lifecycle --------------------------------------------------------------------------------
    async def on_start(self) -> None:
        options = dict(self.client_options)
        if self.static_membership:
            options.setdefault("group_instance_id", self.receiver_id)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset=self.auto_offset_reset,
            **options,
        )
        if self.topic_pattern is not None:  # aiokafka matches from the start only: anchor the end too
            self.consumer.subscribe(pattern=f"(?:{self.topic_pattern})\\Z", listener=_Rebalance(self))
        else:
            self.consumer.subscribe(topics=self.topics, listener=_Rebalance(self))
        log.info(
            "receiver %s joins group %s on %s%s (client settings %s)",
            self.receiver_id,
            self.group_id,
            self.bootstrap_servers,
            f" as static member {options['group_instance_id']}" if options.get("group_instance_id") else "",
            redacted(self._client_given),
        )
        try:
            await self.consumer.start()
        except BaseException as exc:
            await self._close_consumer()
            if (refused := self._refusal(exc, fetching=False)) is None:
                raise
            self._stop_refused(refused)
            return
        if self.fetches_batches:
            self.spawn(
                self._refusals_stop(self._fetch_batches(), fetching=False), name=f"kafka-fetch-{self.receiver_id}"
            )
        else:
            self.spawn(self._refusals_stop(self._poll(), fetching=True), name=f"kafka-poll-{self.receiver_id}")

    def _refusal(self, exc: BaseException, *, fetching: bool) -> KafkaAuthorizationError | None:
        principal = principal_of(self.client_options)
        return authorization_error(
            exc, group_id=self.group_id, topics=self.topics, fetching=fetching, principal=principal
        )

    async def _refusals_stop(self, loop: Coroutine[Any, Any, None], *, fetching: bool) -> None:
        """Run ``loop``; the authorizer's refusal stops the receiver instead of restarting it
        (:mod:`~sluice.kafka.authorization`: every retry would be refused alike)."""
        try:
            await loop
        except Exception as exc:
            if (refused := self._refusal(exc, fetching=fetching)) is None:
                raise
            self._stop_refused(refused)

    def _stop_refused(self, refused: KafkaAuthorizationError) -> None:
        if self._supervisor is not None:
            self._supervisor.metrics.error("authorization")
        self.stop(f"receiver {self.receiver_id}: {refused}", refused)

    @property
    def fetches_batches(self) -> bool:
        """Whether this receiver stores record batches as fetched (see the module docstring):
        always but with deserializers, which need aiokafka's records."""
        return not any(k in self.client_options for k in _RECORD_OPTIONS)

    async def on_stop(self) -> None:
        """Stop storing; the consumer stays open until ``close`` so acknowledged blocks can commit."""

    async def close(self) -> None:
        await self._close_consumer()

    async def _close_consumer(self) -> None:
        consumer, self.consumer = self.consumer, None
        self._assigned = set()
        if consumer is not None:
            try:
                await consumer.stop()
            except Exception as exc:  # noqa: BLE001 - leaving the group is best effort
                log.warning("stopping the Kafka consumer of %s failed: %s", self.receiver_id, exc)

    # -- receiving --------------------------------------------------------------------------------
    async def _poll(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        limiter = self.supervisor.limiter
        # what a read_committed consumer can reach is the last stable offset, not the high watermark
        committed = self.client_options.get("isolation_level") == "read_committed"
        readable_end = consumer.last_stable_offset if committed else consumer.highwater
        while True:
            # at most ~half a second of records per poll at the current rate, so a revocation that
            # waits for the batch in hand (below) waits little
            max_records = max(100, min(self.max_poll_records, int(min(limiter.rate, 1e9) / 2)))
            batches = await consumer.getmany(timeout_ms=self.poll_timeout_ms, max_records=max_records)
            for tp, messages in batches.items():
                async with self._storing:
                    if not messages or tp not in self._assigned or tp in self._revoking:
                        continue  # revoked while we fetched: the next owner reads these
                    # each piece is encoded into the block format's columns now (column-wise, in
                    # C), so the buffer holds compact bytes and the ConsumerRecords die young
                    partition = (tp.topic, tp.partition)
                    for piece, offsets in limiter_pieces(messages, self.piece_size):
                        if tp in self._revoking:
                            break  # the rest is not stored, so not committed: the next owner reads it
                        encoded = encode_kafka_piece(piece, partition)
                        await self.store_encoded(encoded, {partition: offsets})
                        self._progress.took(tp, offsets[1], encoded.last_timestamp_ms, readable_end(tp))
            self._update_lag(readable_end)
            if committed:
                self._update_open(consumer.highwater, consumer.last_stable_offset)

    async def _fetch_batches(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        fetcher = RecordBatchFetcher(consumer, self.client_options)
        try:
            while True:
                positions = await self._positions(consumer)
                if not positions:
                    await consumer.getmany(timeout_ms=self.poll_timeout_ms)  # waits for an assignment
                    continue
                await self._poll_alive()
                fetched = await fetcher.fetch_next(positions)
                if not await self._store_round(consumer, fetched, fetcher.read_committed):
                    return
                if fetched.failed or self._losses.gaps.waiting():
                    await asyncio.sleep(fetcher.retry_backoff_s)
        finally:
            fetcher.close()

    async def _store_round(self, consumer: AIOKafkaConsumer, fetched: FetchRound, read_committed: bool) -> bool:
        """Store what the leaders that answered sent; False once the receiver stops on unreadable
        batches.  A partition's answer is for the position it was fetched from: one the receiver has
        moved from since (a reset, a request to a former leader still in flight) is left out."""
        # the end it can read to: under read_committed the last stable offset, not the high watermark
        readable_end = fetched.last_stable.get if read_committed else fetched.highwater.get
        current = self._progress.next_offset.get
        for tp, data in fetched.data.items():
            if (at := fetched.positions[tp]) != current(tp):
                continue
            try:
                data = self._losses.through_gap(tp, data, at)
                arrived = fetched.received_ms[tp]
                if (aborted := fetched.aborted.get(tp)) and data:
                    await self._store_committed(tp, data, aborted, at, readable_end(tp), arrived)
                elif data:
                    await self._store_batches(tp, data, at, readable_end(tp), arrived)
            except BatchFormatError as exc:
                self._losses.unreadable(tp, at, exc)
                return False
        for tp in fetched.out_of_range:
            if (at := fetched.positions[tp]) == current(tp):
                await self._reset_position(consumer, tp, at)
        self._update_lag(readable_end)
        if read_committed:
            self._update_open(fetched.highwater.get, fetched.last_stable.get)
        return True

    async def _positions(self, consumer: AIOKafkaConsumer) -> dict[TopicPartition, int]:
        """Where to fetch each owned partition: after what was stored, or the group's committed
        position (``auto_offset_reset`` without one) for a partition just assigned."""
        for tp in self._assigned - self._revoking - self._progress.next_offset.keys():
            try:
                self._progress.next_offset[tp] = await consumer.position(tp)
            except IllegalStateError:
                continue  # revoked while we asked
        positions = self._progress.next_offset
        return {tp: positions[tp] for tp in self._assigned - self._revoking if tp in positions}

    async def _store_batches(
        self, tp: TopicPartition, data: bytes | memoryview, position: int, highwater: int | None, fetched_ms: int
    ) -> None:
        """Store one partition's fetched batches piece by piece from ``position``; ``fetched_ms``:
        when their fetch response arrived (the pieces' fetch stamp, :mod:`sluice.stages`).

        ``_storing`` is held for one piece at a time: a rebalance waits for it and must not wait for
        a whole fetch (minutes of records at a low rate), and the ``getmany`` of
        :meth:`_poll_alive` between pieces waits while the group reassigns partitions.
        """
        partition = (tp.topic, tp.partition)
        moved = False
        for piece in batch_pieces(tp.topic, tp.partition, data, position, self.piece_size, highwater):
            async with self._storing:
                at = self._progress.next_offset.get(tp)
                if tp not in self._assigned or tp in self._revoking or at != piece.from_offset:
                    return  # revoked (or reset) meanwhile: the rest is fetched again, by whoever owns it
                if piece.num_records:
                    await self.store_encoded(piece, {partition: (piece.from_offset, piece.until_offset)}, fetched_ms)
                self._progress.took(tp, piece.until_offset, piece.last_timestamp_ms, highwater)
            moved = True
            await self._poll_alive()
        if data and not moved:
            log.warning(
                "receiver %s: %d bytes fetched from %s/%d at offset %d hold no whole record batch; "
                "fetching again (a batch larger than max_partition_fetch_bytes stalls here on a "
                "broker older than Kafka 0.10.1)",
                self.receiver_id,
                len(data),
                tp.topic,
                tp.partition,
                position,
            )

    async def _store_committed(
        self,
        tp: TopicPartition,
        data: bytes,
        aborted: list[tuple[int, int]],
        position: int,
        highwater: int | None,
        fetched_ms: int,
    ) -> None:
        """Store what ``data`` holds of committed transactions; when it ends with aborted batches
        (a fetch cut before their marker), move past them too, or the next fetch would bring the
        same batches again."""
        kept = committed(data, aborted)
        if kept:
            await self._store_batches(tp, kept, position, highwater, fetched_ms)
        until, kept_until = fetched_until(data), fetched_until(kept)
        if until is None or until == kept_until:
            return
        async with self._storing:
            at = self._progress.next_offset.get(tp)
            if tp in self._assigned and tp not in self._revoking and at == (kept_until or position):
                self._progress.took(tp, until, -1, highwater)

    async def _poll_alive(self) -> None:
        """Call ``getmany`` once a second while making progress (never while holding ``_storing``).

        aiokafka leaves the group when ``getmany`` was not called for ``max_poll_interval_ms`` (it
        takes a consumer that stopped polling for a stuck one).  Every owned partition is paused,
        so the call returns nothing; it is made between rounds and between stored pieces, so a low
        rate storing one fetch for minutes stays in the group and a stuck store does not.
        """
        consumer = self.consumer
        if consumer is not None and time.monotonic() - self._alive_at >= _ALIVE_EVERY_S:
            await consumer.getmany(timeout_ms=0)
            self._alive_at = time.monotonic()

    async def _reset_position(self, consumer: AIOKafkaConsumer, tp: TopicPartition, position: int) -> None:
        """A position the log no longer (or not yet) holds: start again where ``auto_offset_reset``
        says, unless :class:`LogLosses` stops the receiver."""
        if not self._losses.out_of_range(tp, position, self.auto_offset_reset):
            return
        try:
            if self.auto_offset_reset == "latest":
                await consumer.seek_to_end(tp)
            else:
                await consumer.seek_to_beginning(tp)
        except IllegalStateError:
            return  # revoked meanwhile
        self._progress.next_offset.pop(tp, None)  # the next round asks the consumer for the reset position

    def _update_lag(self, highwater: Callable[[TopicPartition], int | None]) -> None:
        for tp, lag in self._progress.update_lag(self._assigned, highwater).items():
            if self._supervisor is not None:
                self._supervisor.metrics.lag(tp.topic, tp.partition, lag)

    def _update_open(
        self, highwater: Callable[[TopicPartition], int | None], stable: Callable[[TopicPartition], int | None]
    ) -> None:
        """Under ``read_committed``: the records past each partition's last stable offset."""
        for tp, records in self._progress.update_open(self._assigned, highwater, stable).items():
            if self._supervisor is not None:
                self._supervisor.metrics.open_transaction_records(tp.topic, tp.partition, records)

    def open_transaction_records(self) -> int | None:
        """Records of the assigned partitions past their last stable offsets (``read_committed``
        only; None otherwise): what open transactions hold back from this receiver."""
        return self._progress.total_open(self._assigned)

    def lag(self) -> int | None:
        """Total records behind the ends of the assigned partitions (reported in heartbeats): their
        high watermarks, under ``read_committed`` their last stable offsets, the end it can read to."""
        return self._progress.total_lag(self._assigned)

    def head_timestamp_ms(self) -> int | None:
        """The oldest last-stored timestamp among the assigned partitions that are behind: the next
        record of each waits in Kafka, no older than the one stored before it."""
        return self._progress.head_timestamp_ms(self._assigned)

    def partition_lag(self) -> dict[tuple[str, int], int]:
        return {(tp.topic, tp.partition): lag for tp, lag in self._progress.lag.items() if tp in self._assigned}

    # -- rebalancing and commits --------------------------------------------------------------------
    def partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._assigned = set(assigned)
        if self.fetches_batches and self.consumer is not None and assigned:
            self.consumer.pause(*assigned)  # their records come from the receiver's own fetch requests
        for tp in list(self._progress.next_offset):
            if tp not in assigned:
                self._progress.forget(tp)
                self._losses.gaps.forget(tp)
        log.info("receiver %s assigned %s", self.receiver_id, sorted((tp.topic, tp.partition) for tp in assigned))

    async def partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Acknowledge and commit what we hold for ``revoked`` before aiokafka lets them go."""
        if not revoked:
            return
        log.info(
            "receiver %s: partitions %s revoked; flushing held blocks",
            self.receiver_id,
            sorted((tp.topic, tp.partition) for tp in revoked),
        )
        self._revoking |= revoked
        try:
            async with self._storing:  # records already on their way in belong to the flush below
                pass
            if self._supervisor is not None and self._supervisor.pusher.generator.is_active():
                await self.flush()  # commits happen in on_block_acknowledged, still under the old assignment
        finally:
            self._assigned -= revoked
            self._revoking -= revoked
            for tp in revoked:
                self._committed.pop(tp, None)
                self._progress.forget(tp, lag=False)  # if it comes back, from the group's committed position
                self._losses.gaps.forget(tp)

    async def on_block_acknowledged(self, block_id: str, offset_ranges: tuple[OffsetRange, ...]) -> None:
        consumer = self.consumer
        if consumer is None:
            return
        offsets = {}
        for r in offset_ranges:
            tp = TopicPartition(r.topic, r.partition)
            if tp in self._assigned and r.until_offset > self._committed.get(tp, -1):
                offsets[tp] = r.until_offset
        if not offsets:
            return
        metrics = self._supervisor.metrics if self._supervisor is not None else None
        try:
            await consumer.commit(offsets)
        except (IllegalStateError, KafkaError) as exc:
            if metrics:
                metrics.commit("failed")
            log.warning(
                "commit of %s after block %s failed (%s); the tracker trims what is re-read", offsets, block_id, exc
            )
            return
        self._committed.update(offsets)
        if metrics:
            metrics.commit("ok")
