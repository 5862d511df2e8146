"""A batch's Kafka outputs in its detail, in Debian's headless Chromium: each write a row of what
its tasks did, and a topic name shown as text, never as markup (a ``topic`` column may carry any
string a row holds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.spark_driver.ui import StreamingStore, UIServer
from tests.ui.cdp import Browser
from tests.ui.crowded import START_MS, add_batch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

HOSTILE = '<img src=x id=injected onerror="window.injected = true">'
CELLS = "[...document.querySelectorAll('#detail-outputs tr')].map(r => [...r.cells].map(c => c.textContent))"


def test_a_batch_detail_lists_its_kafka_outputs_as_text(tmp_path: Path) -> None:
    counts = {"written": 0, "empty": 0, "aborted": 0}
    first = {"sink": "kafka", "topic": HOSTILE, "mode": "exactly_once", "records": 42, "committed": 2, "already": 0}
    rerun = {**first, "topic": None, "records": 0, "committed": 0, "already": 2}
    store = StreamingStore(1000)
    add_batch(store, START_MS, outputs=({**first, **counts}, {**rerun, **counts}))
    ui = UIServer(store, "127.0.0.1", 0)
    browser = Browser(tmp_path / "chromium")
    try:
        browser.send("Page.navigate", url=ui.url)
        browser.wait_for(f"document.querySelector('#batches tr[data-batch=\"{START_MS}\"]') !== null", "the batch")
        browser.evaluate(f"document.querySelector('#batches tr[data-batch=\"{START_MS}\"]').click()")
        browser.wait_for("document.querySelectorAll('#detail-outputs tr').length === 2", "the batch's two outputs")
        assert browser.evaluate(CELLS) == [
            [HOSTILE, "exactly_once", "42", "2", "0", "0", "0"],
            ["(each row's)", "exactly_once", "0", "0", "2", "0", "0"],
        ]
        assert browser.evaluate("document.getElementById('injected') === null && window.injected !== true")
        assert browser.errors == []
    finally:
        browser.close()
        ui.close()
