"""``RecordBatchFetcher``: fetch requests of the Kafka receiver's own, answered with raw record batches.

aiokafka's consumer builds a ``ConsumerRecord`` for every record it returns.  A receiver that only
stores records for a reader to decode later does not need them, and building them (then encoding
their fields again into a block) was most of the receiver's interpreter time.  So the receiver
keeps its ``AIOKafkaConsumer`` for what it does well (the group, the assignment, the committed
positions, commits) with every owned partition paused, and fetches those partitions itself with
this class: one ``FetchRequest`` per partition leader on the consumer's own connections, whose
response it keeps as the bytes the broker sent (see :mod:`sluice.kafka.record_batches`).  Direct
mode's range reader (:mod:`sluice.spark_driver.direct.reader`) fetches its range the same way, on
a consumer that holds no group, and decodes the bytes in its task: aiokafka's consumer would
refuse a whole fetch on one record it cannot parse.

Errors come back per partition: a moved leader or an unknown partition refreshes the metadata and
the next round retries; an offset out of range goes back to the receiver, which resets the
position by its ``auto_offset_reset``; the authorizer's refusal (no ``READ`` on the topic) raises
:class:`~sluice.kafka.authorization.KafkaAuthorizationError`, since every retry would be refused
alike.  Under ``isolation_level = read_committed`` (in the options) the requests read committed:
the broker answers up to the last stable offset and lists each partition's aborted transactions,
which :class:`FetchRound` keeps beside the bytes for the reader to leave out
(:func:`sluice.kafka.transactions.committed`).

A receiver fetching partitions of several leaders does not wait for all of them
(:meth:`RecordBatchFetcher.fetch_next`): a leader with nothing new at its positions holds its request
for ``fetch_max_wait_ms`` (500 ms by default), and waiting for every answer made the records the
other leaders had sent wait as long in every such round.  Kafka's consumer fetches from each node on
its own (``Fetcher.sendFetches`` sends to the nodes with no request in flight, and ``poll`` returns
what has arrived); so does this.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition, errors
from aiokafka.protocol.fetch import FetchRequest

from sluice.kafka.aiokafka_internals import consumer_client
from sluice.kafka.authorization import KafkaAuthorizationError, principal_of
from sluice.retry_log import RetryLog, reason
from sluice.stages import now_ms

log = logging.getLogger(__name__)

_MOVED = (
    errors.NotLeaderForPartitionError,
    errors.UnknownTopicOrPartitionError,
    errors.LeaderNotAvailableError,
    errors.KafkaStorageError,
)
_FETCH_SETTINGS = (
    "fetch_max_wait_ms",
    "fetch_min_bytes",
    "fetch_max_bytes",
    "max_partition_fetch_bytes",
    "retry_backoff_ms",
)


@dataclass
class FetchRound:
    """What one round of fetch requests brought: data and high watermarks per partition (under
    ``read_committed`` also the last stable offsets and the aborted transactions), and the
    partitions whose position is out of the log's range."""

    data: dict[TopicPartition, bytes] = field(default_factory=dict)
    highwater: dict[TopicPartition, int] = field(default_factory=dict)
    out_of_range: set[TopicPartition] = field(default_factory=set)
    aborted: dict[TopicPartition, list[tuple[int, int]]] = field(default_factory=dict)  # read_committed only
    last_stable: dict[TopicPartition, int] = field(default_factory=dict)  # read_committed only
    failed: bool = False  # a request or a partition failed: the caller backs off before the next round
    positions: dict[TopicPartition, int] = field(default_factory=dict)  # where each partition was fetched from
    received_ms: dict[TopicPartition, int] = field(default_factory=dict)  # when its data arrived (sluice.stages)

    def merge(self, other: FetchRound) -> None:
        """Take ``other``'s partitions in (another leader's answer)."""
        self.data.update(other.data)
        self.highwater.update(other.highwater)
        self.out_of_range |= other.out_of_range
        self.aborted.update(other.aborted)
        self.last_stable.update(other.last_stable)
        self.positions.update(other.positions)
        self.received_ms.update(other.received_ms)
        self.failed = self.failed or other.failed


class RecordBatchFetcher:
    """Fetch requests for positions the receiver keeps, sent on ``consumer``'s client.

    :param options: the consumer's keyword arguments; the fetch sizes and waits are read from them
        (aiokafka's own defaults where absent), so ``kafka.client`` tunes both paths alike.
    """

    def __init__(self, consumer: AIOKafkaConsumer, options: Mapping[str, Any]) -> None:
        defaults = inspect.signature(AIOKafkaConsumer).parameters
        settings = {name: options.get(name, defaults[name].default) for name in _FETCH_SETTINGS}
        self._client = consumer_client(consumer)  # the consumer's connections and metadata, not a second set
        self._principal = principal_of(options)  # named when the authorizer refuses a fetch
        self._max_wait_ms = settings["fetch_max_wait_ms"]
        self._min_bytes = settings["fetch_min_bytes"]
        self._max_bytes = settings["fetch_max_bytes"]
        self._partition_max_bytes = settings["max_partition_fetch_bytes"]
        self.retry_backoff_s = settings["retry_backoff_ms"] / 1000
        self.read_committed = options.get("isolation_level", "read_uncommitted") == "read_committed"
        self._retries: dict[int, RetryLog] = {}  # per broker: what is said while its fetches fail
        self._in_flight: dict[int, asyncio.Task[FetchRound]] = {}  # per leader: its request of fetch_next

    def _by_leader(
        self, positions: Mapping[TopicPartition, int], result: FetchRound
    ) -> dict[int, list[TopicPartition]]:
        """The partitions of ``positions`` per leader; one without a known leader fails ``result``."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in positions:
            leader = self._client.cluster.leader_for_partition(tp)
            if leader is None or leader == -1:
                result.failed = True
                continue
            by_leader.setdefault(leader, []).append(tp)
        if result.failed:
            self._client.force_metadata_update()
        return by_leader

    async def fetch(self, positions: Mapping[TopicPartition, int]) -> FetchRound:
        """One round: a request per leader of the partitions in ``positions``, sent together, and
        every answer waited for."""
        result = FetchRound()
        by_leader = self._by_leader(positions, result)
        await asyncio.gather(*(self._fetch_from(node, tps, positions, result) for node, tps in by_leader.items()))
        return result

    async def fetch_next(self, positions: Mapping[TopicPartition, int]) -> FetchRound:
        """What the first leaders to answer brought: a request goes to each leader of ``positions``
        with none in flight, and this returns once one has answered.  The others stay in flight
        for the next call (their partitions' positions in it are not sent again); each partition's
        data comes with the position it was fetched from (:attr:`FetchRound.positions`), which may
        be one the caller has moved from since.  :meth:`close` cancels what is in flight."""
        result = FetchRound()
        for node, tps in self._by_leader(positions, result).items():
            if node not in self._in_flight:
                self._in_flight[node] = asyncio.ensure_future(
                    self._fetch_from(node, tps, dict(positions), FetchRound())
                )
        if not self._in_flight:
            return result
        done, _ = await asyncio.wait(self._in_flight.values(), return_when=asyncio.FIRST_COMPLETED)
        self._in_flight = {node: task for node, task in self._in_flight.items() if task not in done}
        raised = [exc for task in done if (exc := task.exception()) is not None]  # each one retrieved
        if raised:
            raise raised[0]
        for task in done:
            result.merge(task.result())
        return result

    def close(self) -> None:
        """Cancel the requests :meth:`fetch_next` left in flight."""
        for task in self._in_flight.values():
            task.cancel()
        self._in_flight.clear()

    async def _fetch_from(
        self, node: int, tps: list[TopicPartition], positions: Mapping[TopicPartition, int], result: FetchRound
    ) -> FetchRound:
        """Fetch ``tps`` from their leader ``node`` into ``result``, which it returns."""
        by_topic: dict[str, list[tuple[int, int, int]]] = {}
        random.shuffle(tps)  # a broker may cut the response's later partitions inside a batch: each gets to be first
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append((tp.partition, positions[tp], self._partition_max_bytes))
        request = FetchRequest(
            self._max_wait_ms, self._min_bytes, self._max_bytes, int(self.read_committed), list(by_topic.items())
        )
        retries = self._retries.get(node)
        if retries is None:  # once per broker, not a new object per fetch round
            retries = self._retries[node] = RetryLog(f"broker {node} for fetches", self.retry_backoff_s)
        try:
            response = await self._client.send(node, request)
        except errors.KafkaError as exc:
            if (line := retries.failed(reason(exc))) is not None:  # a line per outage, not per attempt
                log.warning("%s, after a metadata refresh each time", line)
            self._client.force_metadata_update()
            result.failed = True
            return result
        received = now_ms()
        if (line := retries.reached()) is not None:
            log.info("%s", line)
        for topic, partitions in response.topics:
            for partition, error_code, highwater, *rest in partitions:
                tp = TopicPartition(topic, partition)
                result.positions[tp] = positions.get(tp, -1)
                if error_code == 0:
                    result.data[tp] = rest[-1] or b""
                    result.received_ms[tp] = received
                    result.highwater[tp] = highwater
                    if self.read_committed and response.API_VERSION >= 4:
                        # v4-v10: lso, (log start,) aborted, records; v11 on: lso, log start, aborted, replica, records
                        result.last_stable[tp] = rest[0]
                        result.aborted[tp] = list((rest[2] if response.API_VERSION >= 11 else rest[-2]) or ())
                    continue
                error = errors.for_code(error_code)
                if error is errors.TopicAuthorizationFailedError:  # every retry is refused alike
                    raise KafkaAuthorizationError("topic", topic, "READ", self._principal)
                if error is errors.OffsetOutOfRangeError:
                    result.out_of_range.add(tp)
                else:
                    result.failed = True
                    if issubclass(error, _MOVED):
                        self._client.force_metadata_update()
                    log.warning(
                        "fetching %s/%d at offset %d failed: %s",
                        topic,
                        partition,
                        positions.get(tp, -1),
                        error.__name__,
                    )
        return result
