"""The streaming page of a Structured Streaming query under admission control: a real query over a
real tracker's blocks in the shared session; each progress becomes a completed batch on the page's
API and each rate the admission's estimator answers a decision, with the tracker's receivers."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from sluice.storage.block_store import FileBlockStore
from sluice.tracker.client.sync_client import SyncTrackerClient
from tests.polling import wait_until
from tests.structured.conftest import put_block

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def test_a_query_under_admission_gets_the_page_with_its_batches_and_rate_decisions(
    registered, tracker, tmp_path: Path
) -> None:
    from sluice.spark_driver.structured import admit
    from sluice.spark_driver.ui import serve_query

    spark = registered
    store = FileBlockStore(tmp_path / "blocks")
    with SyncTrackerClient(tracker.address, "receiver") as client:
        for i in range(20):
            put_block(client, store, [f"{i}-{j}" for j in range(50)], stream=3)
    name = f"q{uuid.uuid4().hex[:8]}"
    opts = {"tracker": tracker.address, "streams": "3", "records": "value", "triggerIntervalMs": "500"}
    rows: list[int] = []

    def process(df, batch_id: int) -> None:
        rows.append(df.count())

    admission = admit(spark, query_name=name, options=opts, estimator="pid", initial_rate=400)
    status = SyncTrackerClient(tracker.address, "admin")
    status.start()
    page = serve_query(spark, admission, query_name=name, port=0, tracker_status=status.status)
    query = (
        spark.readStream.format("sluice")
        .options(**opts)
        .load()
        .writeStream.queryName(name)
        .foreachBatch(process)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        # a query that failed (its Python worker starting past Spark's 10 s under load, say) says why
        wait_until(lambda: sum(rows) >= 1000 or not query.isActive, "1,000 rows through the query", 300)
        assert sum(rows) >= 1000, f"the query stopped after batches of {rows} rows: {query.exception()}"
        api = page.url + "api/v1/streaming/"
        # progress reaches listeners on an asynchronous bus, after the batch function returned
        wait_until(
            lambda: sum(b["inputSize"] for b in get(api + "batches")) >= 1000 and len(get(api + "rates")) >= 2,
            "every batch and two rate decisions on the page",
            60,
        )
        batches = get(api + "batches")
        assert all(b["status"] == "COMPLETED" and b["processingTime"] is not None for b in batches)
        assert {d["trigger"] for d in get(api + "rates")} == {"batch"}
        stats = get(api + "statistics")
        assert stats["batchDuration"] == 500 and stats["numTotalCompletedBatches"] == len(batches)
        # the receivers are the tracker's (the blocks' receiver went silent long ago): one registers now
        with SyncTrackerClient(tracker.address, "receiver") as client:
            client.register_receiver(3, "page-receiver", "page-host")
            wait_until(
                lambda: "page-receiver" in [r["executorId"] for r in get(api + "receivers")],
                "the tracker's new receiver on the page",
                30,
            )
        with urllib.request.urlopen(page.url, timeout=10) as response:
            assert b"/static/app.js" in response.read()
    finally:
        query.stop()
        admission.stop()
        page.stop()
        status.close()
