"""The one use of aiokafka's private client: found on a real consumer, refused with the pin named."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.client import AIOKafkaClient

from sluice.errors import InvalidState
from sluice.kafka.aiokafka_internals import consumer_client


async def test_a_consumer_of_the_pinned_aiokafka_has_the_client_sluice_sends_on() -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")  # never started: no connection
    client = consumer_client(consumer)
    assert isinstance(client, AIOKafkaClient)
    assert callable(client.send) and callable(client.force_metadata_update) and callable(client.fetch_all_metadata)
    await client.close()


def test_a_consumer_without_that_client_is_refused_naming_the_pin() -> None:
    class Elsewhere:
        _client = object()  # what a later aiokafka might keep there

    with pytest.raises(InvalidState, match=r"object as its _client\): Sluice needs aiokafka >= 0.13, < 0.15"):
        consumer_client(Elsewhere())
