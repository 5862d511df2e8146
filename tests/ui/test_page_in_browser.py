"""The streaming page in a real browser during a real run: a ``sluice-tracker``, a generator
``sluice-receiver`` and ``sluice-driver`` (PySpark, local[2]) as processes, Debian's headless
Chromium loading the page the driver serves on ``--ui-port``.

The charts must fill and the batches table grow while the page polls, a click on a batch must open
its blocks, and any JavaScript error (an uncaught exception, a console error) fails the test.
``SLUICE_UI_SCREENSHOT=path`` also writes the screenshot there (docs/images/streaming-ui.png is
made this way).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sluice.embedded import driver_argv, free_port, start_service, stop_process, wait_for_port, wait_until
from tests.driver.conftest import driver_tracker
from tests.driver.test_bounded_batches import start_generator
from tests.ui.cdp import Browser

# Spark alone may take minutes to start and run its first batch on a loaded machine: the deadlines
# bound how long a failure takes to show, not how fast a run must be
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROWS = "document.querySelectorAll('#batches tr').length"


def points(canvas: str) -> str:
    return f"Number(document.getElementById('{canvas}').dataset.points || 0)"


def api(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/streaming/{path}", timeout=10) as response:
        return json.load(response)


def test_the_page_fills_live_in_chromium_without_a_javascript_error(tmp_path: Path) -> None:
    tracker = driver_tracker(tmp_path)
    receiver = start_generator(tmp_path, tracker.address, 3_000)
    port = free_port()
    driver_log = tmp_path / "driver.log"
    driver = start_service(
        driver_argv(
            tracker.address,
            app="sluice.demo.app:word_count",
            master="local[2]",
            batch_interval_ms=500,
            block_store=(tmp_path / "blocks").as_uri(),
            extra=["--initial-rate", "2000", "--ui-port", str(port)],
        ),
        env={"SPARK_LOCAL_IP": "127.0.0.1"},
        log=driver_log,
    )
    browser = None
    try:
        wait_for_port(port, driver, name="the driver's streaming page", timeout=300)
        browser = Browser(tmp_path / "chromium")
        browser.send("Page.navigate", url=f"http://127.0.0.1:{port}/")
        browser.wait_for("document.readyState === 'complete'", "the page to load")
        # the first batches: every timeline and histogram has points, the receiver is listed
        browser.wait_for(
            f"{ROWS} >= 3 && {points('timeline-processing')} >= 3 && {points('histogram-total')} >= 3",
            "three completed batches on the page",
            300,
        )
        for chart in ("inputRate", "records", "scheduling", "processing", "total"):
            assert browser.evaluate(points(f"timeline-{chart}")) >= 3, chart
            assert browser.evaluate(points(f"histogram-{chart}")) >= 3, chart
        browser.wait_for(points("rates") + " >= 2", "the estimator's rate decisions")
        browser.wait_for(
            "[...document.querySelectorAll('#receivers td')].some(td => td.textContent === 'active')",
            "the receiver, active",
        )
        assert "127.0.0.1" in browser.evaluate("document.getElementById('tracker').textContent")
        # how a decision is marked: by its reason when it gives one, else by what triggered it
        marks = browser.evaluate(
            "[{reason: 'slow-start probe', trigger: 'in-flight', rate: 9, previousRate: 5},"
            " {reason: 'in-flight cut', trigger: 'in-flight', rate: 3, previousRate: 5},"
            " {reason: null, trigger: 'in-flight', rate: 3, previousRate: 5},"
            " {reason: null, trigger: 'in-flight', rate: 7, previousRate: 5},"
            " {reason: null, trigger: 'batch', rate: 3, previousRate: 5}].map(d => decisionMark(d)[0])"
        )
        assert marks == ["up", "down", "down", "diamond", "dot"]
        # the page keeps polling: the table grows without a reload
        rows, updates = browser.evaluate(ROWS), browser.evaluate("Number(document.body.dataset.updates)")
        browser.wait_for(f"{ROWS} >= {rows + 3}", "three more batches in the table", 120)
        assert browser.evaluate("Number(document.body.dataset.updates)") > updates
        # a batch with records opens its blocks
        busy = next(b for b in api(port, "batches?status=completed") if b["inputSize"] > 0)
        browser.evaluate(f"document.querySelector('#batches tr[data-batch=\"{busy['batchId']}\"]').click()")
        browser.wait_for("document.querySelectorAll('#detail-blocks tr').length >= 1", "the batch's blocks")
        assert not browser.evaluate("document.getElementById('detail').hidden")
        browser.screenshot(tmp_path / "streaming-ui.png")
        assert (tmp_path / "streaming-ui.png").stat().st_size > 10_000
        if os.environ.get("SLUICE_UI_SCREENSHOT"):
            shutil.copy(tmp_path / "streaming-ui.png", os.environ["SLUICE_UI_SCREENSHOT"])
        assert browser.errors == []
        wait_until(lambda: driver.poll() is None, "the driver running", 1, [driver], driver_log)
    finally:
        if browser is not None:
            browser.close()
        stop_process(driver)
        stop_process(receiver)
        stop_process(tracker.proc)
