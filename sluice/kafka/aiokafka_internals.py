"""The one module that touches aiokafka's private attributes: a consumer's ``_client``.

aiokafka's ``AIOKafkaConsumer`` keeps its connections, its cluster metadata and the requests it
sends in an ``AIOKafkaClient`` it holds as ``_client``, and offers no public way to reach them.
Sluice needs them twice, both times to use the consumer's own connections rather than open a
second set to every broker:

* the receiver's and direct mode's own fetches (:mod:`sluice.kafka.fetcher`): raw
  ``FetchRequest`` s whose record batches stay the bytes the broker sent, sent with ``send`` to
  each partition's leader as ``cluster`` names it, ``force_metadata_update`` when a leader moved;
* the driver's offsets client (:mod:`sluice.kafka.offsets_client`): ``fetch_all_metadata``, a fresh
  ``ClusterMetadata`` of every topic (for ``subscribePattern`` and new partitions) that leaves the
  consumer's own metadata, which tracks its assignment, untouched; and a Metadata request for named
  topics (``send`` to any broker), whose per-topic errors tell a topic the principal may not
  ``DESCRIBE`` from one that does not exist (the listing of every topic leaves both out alike);
  and ListOffsets(latest) under ``read_uncommitted`` whatever the consumer's isolation level
  (``send`` to each partition's leader), the high watermark a ``read_committed`` consumer's own
  ``end_offsets`` does not give (it answers the last stable offset).

Checked against aiokafka 0.14.0, the version the project's tests run; ``pyproject.toml`` pins
``aiokafka>=0.13,<0.15``, and a new aiokafka is taken into the pin only once these uses are checked
against it again.  A consumer without such a client fails here, naming the pin.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import StaleMetadata, for_code
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.offset import OffsetRequest

from sluice.errors import InvalidState

__all__ = ["consumer_client", "fetch_all_metadata", "high_watermarks", "topic_errors"]

PINNED = "aiokafka >= 0.13, < 0.15"


def consumer_client(consumer: AIOKafkaConsumer) -> AIOKafkaClient:
    """The consumer's client: its connections and metadata (``send``, ``cluster``,
    ``force_metadata_update``), for requests of Sluice's own."""
    client = getattr(consumer, "_client", None)
    if not callable(getattr(client, "send", None)):  # by what is used, so a test's stand-in broker fits
        raise InvalidState(
            f"this aiokafka's consumer has no client to send Sluice's own requests on ({type(client).__name__} "
            f"as its _client): Sluice needs {PINNED} (see pyproject.toml)"
        )
    return client


async def fetch_all_metadata(consumer: AIOKafkaConsumer) -> ClusterMetadata:
    """Fresh metadata of every topic, on the consumer's connections, without touching its own
    (aiokafka has no public "refresh metadata for these topics")."""
    return await consumer_client(consumer).fetch_all_metadata()


async def topic_errors(consumer: AIOKafkaConsumer, topics: list[str]) -> dict[str, int]:
    """Kafka's error code for each of ``topics`` in a Metadata request naming them (0: none;
    ``TOPIC_AUTHORIZATION_FAILED``, 29: no ``DESCRIBE``), asked without creating any topic."""
    client = consumer_client(consumer)
    response = await client.send(client.get_random_node(), MetadataRequest(topics, allow_auto_topic_creation=False))
    return {str(topic[1]): int(topic[0]) for topic in response.topics}


_LATEST, _READ_UNCOMMITTED = -1, 0


async def high_watermarks(consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Each partition's high watermark: ListOffsets(latest) under ``read_uncommitted``, sent to its
    leader; a partition whose leader is unknown or whose answer is an error raises that error."""
    client = consumer_client(consumer)
    by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for tp in partitions:
        leader = client.cluster.leader_for_partition(tp)
        if leader is None or leader < 0:
            raise StaleMetadata(tp)
        by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append((tp.partition, _LATEST))
    found: dict[TopicPartition, int] = {}
    for leader, topics in by_leader.items():
        response = await client.send(leader, OffsetRequest(-1, _READ_UNCOMMITTED, list(topics.items())))
        for topic, answers in response.topics:
            for partition, error_code, *rest in answers:
                if error_code:
                    raise for_code(error_code)(f"{topic}/{partition}")
                found[TopicPartition(topic, partition)] = int(rest[-1])
    return found
