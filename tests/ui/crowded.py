"""A store as full as the page allows: a thousand retained batches, two thousand rate decisions
and a tracker reporting 1,005 receivers, built directly (no Spark): what a reply costs when the
store is full, and whether the page still draws it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sluice.block_columns import BlockColumns
from sluice.block_info import ReceivedBlockInfo
from sluice.spark_driver.batch import BatchInfo
from sluice.spark_driver.ui.store import Decision, StreamingStore

RECEIVERS = 1005
BATCHES = 1000
DECISIONS = 2000
START_MS = 1_700_000_000_000


def receivers_status(count: int = RECEIVERS) -> dict[str, Any]:
    return {
        "receivers": {
            f"r-{i:04d}": {"receiver_id": f"r-{i:04d}", "stream_id": 0, "host": f"h{i}", "live": True, "lag": i}
            for i in range(count)
        }
    }


def add_batch(store: StreamingStore, time_ms: int, records: int = 30, outputs: tuple[dict, ...] = ()) -> None:
    """A batch through its life: generated with three blocks, submitted, started, completed (with
    ``outputs``, its ``write_kafka`` outputs)."""
    blocks = BlockColumns(
        ReceivedBlockInfo(0, f"b-{time_ms}-{i}", f"r-{i:04d}", records // 3, f"file:///b/{time_ms}-{i}")
        for i in range(3)
    )
    store.on_batch_generated(SimpleNamespace(time_ms=time_ms, blocks=blocks, metadata={}))
    info = BatchInfo(time_ms, records, submission_time_ms=time_ms + 5)
    store.on_batch_submitted(info)
    info = info.with_(processing_start_ms=time_ms + 15, status="running")
    store.on_batch_started(info)
    store.on_batch_completed(info.with_(processing_end_ms=time_ms + 115, status="succeeded", outputs=outputs))


def crowded_store(interval_ms: int = 1000) -> StreamingStore:
    store = StreamingStore(interval_ms, tracker_status=receivers_status, tracker_address="t:7100")
    for i in range(BATCHES):
        add_batch(store, START_MS + i * interval_ms)
    for i in range(DECISIONS):
        reason = "in-flight cut" if i % 10 == 0 else None
        trigger = "in-flight" if reason else "batch"
        store.record_decision(Decision(START_MS + i * 500, "0", 1000.0 + i % 50, None, trigger, reason))
    return store
