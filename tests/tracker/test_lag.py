"""Time behind per stream (``sluice_stream_lag_seconds``): the pure computation, the tracker state it
reads, the metric and its label sets, and the new fields as hostile input."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sluice.block_info import OLDEST_TIMESTAMP, InvalidMessage, ReceivedBlockInfo
from sluice.clock import ManualClock
from sluice.tracker.server import metrics
from sluice.tracker.server.lag import lag_seconds
from sluice.tracker.server.service import TrackerService
from sluice.tracker.wire.protocol import check_request
from tests.tracker.conftest import RawPeer, ThreadServer, make_block

NOW = 1_700_000_000_000  # ms since the epoch


def stamped(block_id: str, oldest_ms: int | None, stream: int = 0) -> ReceivedBlockInfo:
    block = make_block(block_id, stream)
    return block if oldest_ms is None else replace(block, metadata={OLDEST_TIMESTAMP: oldest_ms})


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
def service(clock: ManualClock) -> Iterator[TrackerService]:
    svc = TrackerService(clock=clock, remember_ms=1_000)
    metrics.watch(svc)
    yield svc


def scraped(stream: int) -> float | None:
    return metrics.REGISTRY.get_sample_value("sluice_stream_lag_seconds", {"stream": str(stream)})


def test_lag_is_the_age_of_the_oldest_timestamp_and_never_negative() -> None:
    assert lag_seconds([], [], NOW) == 0.0  # no data: nothing behind
    assert lag_seconds([], [NOW - 90_000], NOW) == 90.0  # the backlog only in Kafka still counts
    assert lag_seconds([NOW - 2_000, NOW - 5_000], [NOW - 3_000], NOW) == 5.0  # the oldest wins
    assert lag_seconds([NOW + 60_000], [NOW + 1], NOW) == 0.0  # a producer's clock ahead: clamped


def test_unfinished_blocks_count_until_their_batch_completes(service: TrackerService, clock: ManualClock) -> None:
    service.registry.register(0, "r0", "h")
    service.tracker.add_block(stamped("b1", NOW - 40_000))
    service.tracker.add_block(stamped("b2", NOW - 10_000))
    service.tracker.add_block(stamped("old-peer", None))  # a block without the timestamp counts nothing
    assert service.stream_lags() == {0: 40.0}
    service.tracker.allocate_blocks(NOW - 1)
    assert service.stream_lags() == {0: 40.0}  # allocated, not completed: still unprocessed
    service.tracker.add_block(stamped("b3", NOW - 1_000))
    service.tracker.batch_completed(NOW - 1, {"batch_time_ms": NOW - 1})
    assert service.stream_lags() == {0: 1.0}  # the completed batch's blocks no longer count
    clock.advance(500)
    assert service.stream_lags() == {0: 1.5}


def test_a_backlog_in_kafka_counts_from_the_receivers_head_only_while_it_is_behind(service: TrackerService) -> None:
    service.registry.register(0, "r0", "h")
    service.registry.register(0, "r1", "h")
    service.registry.heartbeat("r0", lag=5_000, head_ts_ms=NOW - 120_000)
    service.registry.heartbeat("r1", lag=0, head_ts_ms=NOW - 900_000)  # caught up: nothing waits
    assert service.stream_lags() == {0: 120.0}
    service.registry.heartbeat("r0", lag=0, head_ts_ms=NOW - 120_000)
    assert service.stream_lags() == {0: 0.0}
    service.registry.heartbeat("r0", lag=7)  # an older receiver: lag without a head counts nothing
    assert service.stream_lags() == {0: 0.0}


def test_the_metric_follows_the_state_and_its_label_set_leaves_with_the_stream(
    service: TrackerService, clock: ManualClock
) -> None:
    service.registry.register(3, "r3", "h")
    service.registry.heartbeat("r3", lag=10, head_ts_ms=NOW - 30_000)
    service.tracker.add_block(stamped("s3", NOW - 45_000, stream=3))
    assert scraped(3) == 45.0
    service.tracker.allocate_blocks(NOW)
    service.tracker.batch_completed(NOW, {"batch_time_ms": NOW})
    assert scraped(3) == 30.0
    service.registry.deregister("r3")
    assert scraped(3) == 0.0  # no receiver and no unfinished block: nothing behind, not yet forgotten
    for _ in range(2):
        clock.advance(1_000)
        service.check_liveness()
    assert 3 not in service.tracker.stream_ids() and scraped(3) is None


@pytest.mark.parametrize("bad", ["1700000000000", -1, True, 1.5, 10**15, [1]])
def test_a_bad_head_timestamp_is_refused_naming_what_is_allowed(bad: object) -> None:
    with pytest.raises(InvalidMessage, match=r"heartbeat\.head_ts_ms .* expected an integer from 0 to"):
        check_request({"op": "heartbeat", "id": 1, "receiver_id": "r0", "lag": 3, "head_ts_ms": bad})


@pytest.mark.parametrize("bad", ["1700000000000", -1, True, 1.5, 10**15, {"ms": 1}])
def test_a_bad_block_timestamp_is_refused_naming_what_is_allowed(bad: object) -> None:
    wire = make_block("b").to_wire()
    wire["metadata"] = {OLDEST_TIMESTAMP: bad}
    with pytest.raises(InvalidMessage, match=rf"add_block\.block\.metadata\.{OLDEST_TIMESTAMP} .* an integer from 0"):
        check_request({"op": "add_block", "id": 1, "block": wire})


def test_the_new_fields_are_optional_and_bad_ones_leave_the_server_serving(tmp_path: Path) -> None:
    srv = ThreadServer(tmp_path / "wal", open_kwargs={"block_stores": [f"file://{tmp_path}/store"]})
    try:
        peer = RawPeer(srv.port)
        assert "ok" in peer.hello("receiver")

        def call(op: str, **fields: object) -> dict:
            peer.send({"op": op, "id": 1, **fields})
            reply = peer.recv()
            assert reply is not None
            return reply

        incarnation = call("register_receiver", stream_id=0, receiver_id="r0", host="h")["ok"]["incarnation"]
        assert call("heartbeat", receiver_id="r0", lag=4)["ok"] == {"known": True}  # as a protocol-5 peer sends
        bad = call("heartbeat", receiver_id="r0", lag=4, head_ts_ms="yesterday")
        assert bad["error"]["code"] == "invalid" and "head_ts_ms" in bad["error"]["message"]
        wire = make_block(f"input-0-r0-{incarnation}-1").to_wire()
        wire["location"] = f"file://{tmp_path}/store/stream-0/{wire['block_id']}.blk"
        wire["metadata"] = {OLDEST_TIMESTAMP: -5}
        assert call("add_block", block=wire)["error"]["code"] == "invalid"
        assert call("heartbeat", receiver_id="r0", lag=4, head_ts_ms=NOW)["ok"] == {"known": True}
        wire["metadata"] = {OLDEST_TIMESTAMP: NOW}
        assert call("add_block", block=wire)["ok"]["accepted"] is True
        assert srv.server.service.tracker.get_unallocated_blocks(0)[0].oldest_timestamp_ms == NOW
    finally:
        srv.stop()
