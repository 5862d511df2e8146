"""A receiver's fetch rounds do not wait for the slowest leader: a leader with nothing new holds its
request for ``fetch_max_wait_ms``, and the records the other leaders sent must not wait with it.

The embedded broker is one node, the leader of every partition, so the leaders here are a stand-in
client (as in ``test_kafka_fetcher_outage``): leader 1 answers at once, leader 2 when released."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aiokafka import TopicPartition

from sluice.kafka.fetcher import RecordBatchFetcher

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)  # led by brokers 1 and 2


class TwoLeaders:
    """A consumer client whose broker ``p % 2 + 1`` leads partition ``p``; a broker in ``held``
    answers a fetch only once ``release`` is set for it."""

    def __init__(self) -> None:
        self.cluster = SimpleNamespace(leader_for_partition=lambda tp: tp.partition % 2 + 1)
        self.held: dict[int, asyncio.Event] = {}
        self.sent: list[tuple[int, list[tuple[int, int]]]] = []  # (broker, [(partition, offset)])
        self.cancelled: list[int] = []
        self.cancel_seen = asyncio.Event()

    async def send(self, node: int, request) -> object:
        ((topic, partitions),) = request.topics
        self.sent.append((node, [(p, offset) for p, offset, _ in partitions]))
        try:
            if node in self.held:
                await self.held[node].wait()
        except asyncio.CancelledError:
            self.cancelled.append(node)
            self.cancel_seen.set()
            raise
        answers = [(p, 0, offset + 1, f"{topic}/{p}@{offset}".encode()) for p, offset, _ in partitions]
        return SimpleNamespace(topics=[(topic, answers)])

    def force_metadata_update(self) -> None:
        pass


async def test_the_leader_that_answers_is_not_held_by_one_that_waits():
    client = TwoLeaders()
    client.held[2] = asyncio.Event()
    fetcher = RecordBatchFetcher(SimpleNamespace(_client=client), {})

    first = await asyncio.wait_for(fetcher.fetch_next({T0: 5, T1: 7}), 5)
    assert first.data == {T0: b"t/0@5"} and first.positions == {T0: 5} and first.highwater == {T0: 6}
    assert list(first.received_ms) == [T0]  # its pieces' fetch stamp (sluice.stages)
    second = await asyncio.wait_for(fetcher.fetch_next({T0: 6, T1: 7}), 5)
    assert second.data == {T0: b"t/0@6"}
    assert client.sent == [(1, [(0, 5)]), (2, [(1, 7)]), (1, [(0, 6)])]  # broker 2's request not sent twice

    client.held[1] = asyncio.Event()
    client.held[2].set()
    third = await asyncio.wait_for(fetcher.fetch_next({T0: 7, T1: 7}), 5)
    assert third.data == {T1: b"t/1@7"} and third.positions == {T1: 7}  # the position it was sent for
    fetcher.close()  # broker 1's third request was still in flight
    await asyncio.wait_for(client.cancel_seen.wait(), 5)
    assert client.cancelled == [1]
