"""A broker away says so once, not once per fetch: the receiver retries its fetches every
``retry_backoff_ms`` (100 ms), and a fault campaign's receiver logs grew by ten lines a second
while the broker restarted.  One line when the fetches start failing, one when they succeed again."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition, errors

from sluice.kafka.fetcher import RecordBatchFetcher


class AwayBroker:
    """A consumer client whose broker 1 refuses ``failing`` fetches, then answers with no data."""

    def __init__(self, failing: int) -> None:
        self.failing = failing
        self.refreshes = 0
        self.cluster = SimpleNamespace(leader_for_partition=lambda tp: 1)

    async def send(self, node: int, request: object) -> object:
        if self.failing:
            self.failing -= 1
            raise errors.NodeNotReadyError("Attempt to send a request to node which is not ready (node id 1).")
        return SimpleNamespace(topics=[])

    def force_metadata_update(self) -> None:
        self.refreshes += 1


def test_an_outage_of_fifty_failed_fetches_is_two_lines(caplog: pytest.LogCaptureFixture) -> None:
    client = AwayBroker(failing=50)
    fetcher = RecordBatchFetcher(SimpleNamespace(_client=client), {})
    tp = TopicPartition("t", 0)

    async def rounds() -> list[bool]:
        return [(await fetcher.fetch({tp: 0})).failed for _ in range(51)]

    with caplog.at_level(logging.INFO, logger="sluice.kafka.fetcher"):
        failed = asyncio.run(rounds())
    assert failed == [True] * 50 + [False] and client.refreshes == 50  # each attempt still refreshes
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("cannot reach broker 1 for fetches (NodeNotReadyError")
    assert lines[1].startswith("reached broker 1 for fetches after") and "51 attempts" in lines[1]
