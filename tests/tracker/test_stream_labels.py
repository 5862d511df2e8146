"""A stream's metric label sets leave with the stream: streams that come and go (6,000 of them,
each with a receiver that died) do not pile up series in /metrics."""

from __future__ import annotations

from sluice.clock import ManualClock
from sluice.tracker.server.metrics import REGISTRY, sample
from sluice.tracker.server.service import TrackerService


def series_of(stream: str) -> int:
    return sum(1 for family in REGISTRY.collect() for s in family.samples if s.labels.get("stream") == stream)


def test_a_forgotten_streams_label_sets_are_removed() -> None:
    clock = ManualClock(1_000_000)
    service = TrackerService(clock=clock, liveness_timeout_ms=1000, remember_ms=5000)
    for stream in range(7000, 7050):
        service.op_register_receiver({"stream_id": stream, "receiver_id": f"r-{stream}", "host": "h"}, None)
    clock.advance(2000)
    service.check_liveness()  # every receiver dead
    assert sample("sluice_tracker_receivers_dead_total", {"stream": "7000"}) == 1
    clock.advance(1)
    service.check_liveness()  # idle from now
    clock.advance(6000)
    service.check_liveness()  # forgotten
    assert [series_of(str(stream)) for stream in range(7000, 7050)] == [0] * 50
