"""The streaming API over a real store and a real HTTP server: Spark's field names, status filters,
batch detail with blocks, bounded retention, rate decisions with their trigger and reason, the
tracker's status shown whatever fields it has, and one-line errors for bad paths and parameters."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from sluice.block_columns import BlockColumns
from sluice.block_info import ReceivedBlockInfo
from sluice.spark_driver.batch import BatchInfo
from sluice.spark_driver.ui import UIServeError, UIServer
from sluice.spark_driver.ui.api import batch_detail, batch_json
from sluice.spark_driver.ui.store import RecordedController, StreamingStore

SPARK_STATISTICS = {
    "startTime", "batchDuration", "numReceivers", "numActiveReceivers", "numInactiveReceivers",
    "numTotalCompletedBatches", "numRetainedCompletedBatches", "numActiveBatches", "numProcessedRecords",
    "numReceivedRecords", "avgInputRate", "avgSchedulingDelay", "avgProcessingTime", "avgTotalDelay",
}  # fmt: skip
SPARK_BATCH = {
    "batchId", "batchTime", "status", "batchDuration", "inputSize", "schedulingDelay", "processingTime",
    "totalDelay", "numActiveOutputOps", "numCompletedOutputOps", "numFailedOutputOps", "numTotalOutputOps",
    "firstFailureReason",
}  # fmt: skip
SPARK_RECEIVER = {
    "streamId", "streamName", "isActive", "executorId", "executorHost", "lastErrorTime", "lastErrorMessage",
    "lastError", "avgEventRate", "eventRates",
}  # fmt: skip

STATUS = {
    "receivers": {
        "r-1": {"receiver_id": "r-1", "stream_id": 0, "host": "h1", "live": True, "lag": 7, "rate": 50.0,
                "last_error": None, "last_seen_ms": 1_000},
        "r-2": {"receiver_id": "r-2", "stream_id": 0, "live": False},
    },
    "streams": {0: {"unallocated_blocks": 0}},
    "pending_batches": [],
    "rates": {0: 100.0},
    "leader": "tracker-a:7100",
    "standby": ["tracker-b:7100"],
}  # fmt: skip


def batch(time_ms: int, receivers: list[str], skipped: int = 0) -> SimpleNamespace:
    blocks = BlockColumns(
        ReceivedBlockInfo(0, f"b-{time_ms}-{i}", rid, 10, f"file:///blocks/{time_ms}-{i}")
        for i, rid in enumerate(receivers)
    )
    return SimpleNamespace(time_ms=time_ms, blocks=blocks, metadata={"skipped_blocks": skipped})


def run(store: StreamingStore, time_ms: int, records: int, status: str = "succeeded", attempts: int = 1) -> None:
    info = BatchInfo(time_ms, records, submission_time_ms=time_ms + 5)
    store.on_batch_submitted(info)
    info = info.with_(processing_start_ms=time_ms + 15, status="running")
    store.on_batch_started(info)
    store.on_batch_completed(info.with_(processing_end_ms=time_ms + 115, status=status, attempts=attempts))


@pytest.fixture
def store() -> StreamingStore:
    return StreamingStore(1000, retained_batches=3, tracker_status=lambda: STATUS, tracker_address="t:7100")


@pytest.fixture
def server(store: StreamingStore) -> Iterator[UIServer]:
    ui = UIServer(store, "127.0.0.1", 0)
    yield ui
    ui.close()


def get(server: UIServer, path: str) -> Any:
    with urllib.request.urlopen(server.url + path.lstrip("/"), timeout=10) as response:
        return json.load(response)


def status_of(server: UIServer, path: str) -> tuple[int, str]:
    try:
        urllib.request.urlopen(server.url + path.lstrip("/"), timeout=10)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)["error"]
    return 200, ""


def test_batches_keep_spark_field_names_and_only_the_retained_ones(store, server) -> None:
    for i, t in enumerate((1000, 2000, 3000, 4000)):
        store.on_batch_generated(batch(t, ["r-1", "r-1", "r-2"], skipped=i))
        run(store, t, 30, status="skipped" if t == 3000 else "succeeded", attempts=3 if t == 3000 else 1)
    store.on_batch_submitted(BatchInfo(5000, 30, submission_time_ms=5001))
    batches = get(server, "api/v1/streaming/batches")
    assert [b["batchId"] for b in batches] == [5000, 4000, 3000]  # newest first; the oldest were let go
    assert SPARK_BATCH <= set(batches[1])
    queued, done, skipped = batches
    assert (queued["status"], queued["schedulingDelay"], queued["totalDelay"]) == ("QUEUED", None, None)
    assert (done["status"], done["schedulingDelay"], done["processingTime"], done["totalDelay"]) == (
        "COMPLETED", 10, 100, 110,
    )  # fmt: skip
    assert done["batchTime"] == "1970-01-01T00:00:04.000GMT"
    assert (skipped["outcome"], skipped["retries"], skipped["numFailedOutputOps"], skipped["skippedBlocks"]) == (
        "skipped", 2, 1, 2,
    )  # fmt: skip
    assert [b["batchId"] for b in get(server, "api/v1/streaming/batches?status=queued")] == [5000]
    detail = get(server, "api/v1/streaming/batches/4000")
    assert [b["blockId"] for b in detail["blocks"]] == ["b-4000-0", "b-4000-1", "b-4000-2"]
    assert detail["recordsByReceiver"] == {"r-1": 20, "r-2": 10}
    stats = get(server, "api/v1/streaming/statistics")
    assert set(stats) == SPARK_STATISTICS
    assert (stats["numTotalCompletedBatches"], stats["numRetainedCompletedBatches"], stats["numActiveBatches"]) == (
        4, 2, 1,
    )  # fmt: skip
    assert (stats["numProcessedRecords"], stats["numReceivedRecords"], stats["avgTotalDelay"]) == (90, 150, 110)


def test_receivers_and_tracker_show_what_the_tracker_reported(store, server) -> None:
    store.on_batch_generated(batch(1000, ["r-1", "r-1"]))
    run(store, 1000, 20)
    first, second = get(server, "api/v1/streaming/receivers")
    assert SPARK_RECEIVER <= set(first)
    assert (first["executorId"], first["isActive"], first["lag"], first["rate"]) == ("r-1", True, 7, 50.0)
    assert first["eventRates"] == [[1000, 20.0]] and second["eventRates"] == [[1000, 0.0]]
    assert (second["isActive"], second["executorHost"], second["lag"]) == (False, None, None)  # missing: null
    tracker = get(server, "api/v1/streaming/tracker")
    assert tracker["address"] == "t:7100" and tracker["reachable"]
    assert (tracker["status"]["leader"], tracker["status"]["standby"]) == ("tracker-a:7100", ["tracker-b:7100"])
    assert "receivers" not in tracker["status"]


def test_an_unreachable_tracker_is_one_line_not_a_failed_page() -> None:
    def away() -> dict:
        raise ConnectionRefusedError("connection refused")

    ui = UIServer(StreamingStore(1000, tracker_status=away, tracker_address="t:7100"), "127.0.0.1", 0)
    try:
        tracker = get(ui, "api/v1/streaming/tracker")
        assert (tracker["reachable"], tracker["error"]) == (False, "ConnectionRefusedError: connection refused")
        assert get(ui, "api/v1/streaming/receivers") == []
    finally:
        ui.close()


def test_rate_decisions_carry_their_trigger_and_reason(store, server) -> None:
    class Controller:
        last_reason: str | None = None
        wants_signals = True

        def on_batch_completed(self, info):
            return 200.0

        def on_in_flight(self, signals):
            self.last_reason = "in-flight cut"
            return SimpleNamespace(rate=120.0) if signals.time_ms else None

    recorded = RecordedController(Controller(), store, "0")
    assert recorded.wants_signals  # everything else passes through
    recorded.on_batch_completed(SimpleNamespace(processing_end_ms=1_100))
    recorded.on_in_flight(SimpleNamespace(time_ms=1_300))
    recorded.on_in_flight(SimpleNamespace(time_ms=0))  # no rate answered: no decision
    rates = get(server, "api/v1/streaming/rates")
    assert [(r["timeMs"], r["rate"], r["previousRate"], r["trigger"], r["reason"]) for r in rates] == [
        (1_100, 200.0, None, "batch", None),
        (1_300, 120.0, 200.0, "in-flight", "in-flight cut"),
    ]


def test_the_page_and_its_files_are_served_and_bad_requests_named(server) -> None:
    with urllib.request.urlopen(server.url, timeout=10) as response:
        assert b"/static/app.js" in response.read() and response.headers["Content-Type"].startswith("text/html")
    for name in ("app.js", "style.css"):
        with urllib.request.urlopen(f"{server.url}static/{name}", timeout=10) as response:
            assert response.status == 200
    assert status_of(server, "api/v1/streaming/batches?status=done") == (
        400, "status='done' is not allowed: expected one of completed, processing, queued",
    )  # fmt: skip
    assert status_of(server, "api/v1/streaming/batches/x")[0] == 400
    assert status_of(server, "api/v1/streaming/batches/123") == (404, "no batch 123 (only the last 3 are kept)")
    assert status_of(server, "api/v1/streaming/nothing")[0] == 404
    assert status_of(server, "static/../server.py")[0] == 404


def test_a_taken_port_is_one_line_or_the_next_free_one(server, store) -> None:
    with pytest.raises(UIServeError, match=rf"driver.ui_port {server.port} on 127.0.0.1 cannot be served: .*in use"):
        UIServer(store, "127.0.0.1", server.port)
    nxt = UIServer(store, "127.0.0.1", server.port, port_retries=16)  # as Spark's UI moves on from 4040
    try:
        assert server.port < nxt.port <= server.port + 16
        assert get(nxt, "api/v1/streaming/batches") == []
    finally:
        nxt.close()


def test_a_batch_shows_its_stages_in_the_order_of_a_records_way() -> None:
    stages = {"buffer": {"p50": 100.0, "p99": 190.0}, "allocation_wait": {"p50": 400.0, "p99": 990.0}}
    info = BatchInfo(1000, 10, submission_time_ms=1005, stages=stages)
    assert batch_json(info, None, 1000)["stages"] == [
        {"stage": "buffer", "p50": 100.0, "p99": 190.0},
        {"stage": "allocation_wait", "p50": 400.0, "p99": 990.0},
    ]
    assert batch_json(BatchInfo(1000, 10, submission_time_ms=1005), None, 1000)["stages"] == []


def test_a_batch_detail_shows_each_kafka_output_and_the_list_does_not() -> None:
    written = {"sink": "kafka", "topic": "out", "mode": "exactly_once", "records": 5, "committed": 1, "already": 0}
    rerun = {**written, "records": 0, "committed": 0, "already": 1}
    info = BatchInfo(1000, 10, submission_time_ms=1005, outputs=(written, rerun))
    assert batch_detail(info, None, 1000)["outputs"] == [written, rerun]
    assert "outputs" not in batch_json(info, None, 1000)  # the polled list stays small
    assert batch_detail(BatchInfo(1000, 10, submission_time_ms=1005), None, 1000)["outputs"] == []
