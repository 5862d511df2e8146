"""The range reader's consumer cache against the real broker: one consumer serves a worker's tasks,
a stale one is replaced without losing or repeating a record, idle and surplus ones are closed."""

from __future__ import annotations

import pytest

from sluice.block_info import OffsetRange
from sluice.clock import ManualClock
from sluice.spark_driver.direct.reader import ConsumerCache, RangeReadError, read_range
from tests.direct.conftest import produce

pytestmark = pytest.mark.kafka


@pytest.fixture
def cache():
    cache = ConsumerCache(capacity=2, idle_timeout_ms=60_000, clock=ManualClock())
    yield cache
    cache.close()


def values(
    bootstrap: str,
    topic: str,
    partition: int,
    start: int,
    until: int,
    cache: ConsumerCache,
    poll_timeout_ms: int = 60_000,
    **options,
) -> list[str]:
    r = OffsetRange(topic, partition, start, until)
    found = read_range(bootstrap, r, cache=cache, client_options=options, poll_timeout_ms=poll_timeout_ms)
    return [rec.value.decode() for rec in found]


def test_ranges_read_one_after_another_share_one_consumer(kafka_broker, cache) -> None:
    topic = kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {0: 300, 1: 300})
    ranges = [(0, 0, 100), (1, 50, 300), (0, 100, 300)]
    got = [values(kafka_broker.bootstrap, topic, p, a, b, cache) for p, a, b in ranges]
    assert got == [
        [f"v-0-{i}" for i in range(100)],
        [f"v-1-{i}" for i in range(50, 300)],
        [f"v-0-{i}" for i in range(100, 300)],
    ]
    assert cache.created == 1


def test_a_stale_cached_consumer_is_replaced_mid_range_without_loss(kafka_broker, cache) -> None:
    topic = kafka_broker.create_topic(1)
    produce(kafka_broker.bootstrap, topic, {0: 50})
    assert values(kafka_broker.bootstrap, topic, 0, 0, 10, cache) == [f"v-0-{i}" for i in range(10)]
    ((stale, _),) = cache._idle.values()
    cache.loop.run_until_complete(stale.stop())  # closed under the cache: its next fetch fails
    assert values(kafka_broker.bootstrap, topic, 0, 10, 50, cache) == [f"v-0-{i}" for i in range(10, 50)]
    assert cache.created == 2


def test_a_new_consumer_that_fails_fails_the_range(kafka_broker, cache) -> None:
    """No retry for a consumer that was not cached: the broker's error reaches the task, and the
    consumer is closed, not kept."""
    topic = kafka_broker.create_topic(1)
    produce(kafka_broker.bootstrap, topic, {0: 5})
    # past the log's end: Apache Kafka answers the fetch with OFFSET_OUT_OF_RANGE
    with pytest.raises(RangeReadError, match=rf"{topic}/0 \[50, 60\) failed at offset 50: OffsetOutOfRangeError"):
        values(kafka_broker.bootstrap, topic, 0, 50, 60, cache, poll_timeout_ms=300)
    assert cache.created == 1 and not cache._idle


def test_idle_and_surplus_consumers_are_closed(kafka_broker, cache) -> None:
    topic = kafka_broker.create_topic(1)
    produce(kafka_broker.bootstrap, topic, {0: 5})
    for client_id in ("a", "b", "c"):  # three configurations, capacity two: the oldest goes
        values(kafka_broker.bootstrap, topic, 0, 0, 5, cache, client_id=client_id)
    assert [dict(key[1])["client_id"] for key in cache._idle] == ["'b'", "'c'"]
    cache.clock.advance(60_001)
    values(kafka_broker.bootstrap, topic, 0, 0, 5, cache, client_id="c")  # both sat idle too long
    assert cache.created == 4 and len(cache._idle) == 1
