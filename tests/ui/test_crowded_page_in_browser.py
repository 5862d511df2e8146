"""The streaming page over a full store in Debian's headless Chromium: a thousand batches, two
thousand rate decisions, 1,005 receivers.  The page must draw them all from bounded replies (the
changes since its version, page after page, then only what is new; the receivers a page at a
time), under its Content-Security-Policy with no JavaScript error or policy violation."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.spark_driver.ui import UIServer
from tests.ui.cdp import Browser
from tests.ui.crowded import BATCHES, DECISIONS, START_MS, add_batch, crowded_store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROWS = "document.querySelectorAll('#batches tr').length"
RANGE = "document.getElementById('receivers-range').textContent"
FIRST_RECEIVER = "document.querySelector('#receivers tr td').textContent"
POINTS = "Number(document.getElementById('{}').dataset.points || 0)"
# the largest reply body the page has fetched, and the one of the latest pull of changes
LARGEST = "Math.max(...performance.getEntriesByType('resource').map(e => e.encodedBodySize))"
LAST_PULL = "performance.getEntriesByType('resource').filter(e => e.name.includes('/changes?')).at(-1).encodedBodySize"


def test_a_full_store_is_drawn_from_bounded_replies_and_polled_by_its_changes(tmp_path: Path) -> None:
    store = crowded_store()
    ui = UIServer(store, "127.0.0.1", 0)
    browser = Browser(tmp_path / "chromium")
    try:
        browser.send("Performance.enable")
        browser.evaluate("performance.setResourceTimingBufferSize(100000)")
        browser.send("Page.navigate", url=ui.url)
        browser.wait_for(
            f"{ROWS} === 100 && {POINTS.format('timeline-processing')} === {BATCHES}"
            f" && {POINTS.format('rates')} === {DECISIONS}",
            "every retained batch and decision on the page",
        )
        assert browser.evaluate(LARGEST) < 300_000  # no reply near the 16.8 MB of the whole receivers list
        assert browser.evaluate("document.querySelectorAll('#receivers tr').length") == 50
        shown = browser.evaluate(RANGE)
        assert shown.startswith("1–50 of ") and "".join(c for c in shown if c.isdigit()) == "1501005", shown
        browser.evaluate("document.getElementById('receivers-next').click()")
        browser.wait_for(f"{FIRST_RECEIVER} === 'r-0050'", "the next page of receivers")
        assert browser.evaluate(RANGE).startswith("51–100 of ")
        # a new batch: on top of the table, the oldest let go, the page's pulls carrying just it
        newest = START_MS + BATCHES * 1000
        updates = browser.evaluate("Number(document.body.dataset.updates)")
        add_batch(store, newest)
        browser.wait_for(f"document.querySelector('#batches tr').dataset.batch === '{newest}'", "the new batch")
        browser.wait_for(f"Number(document.body.dataset.updates) > {updates + 1}", "two more polls")
        assert browser.evaluate(POINTS.format("timeline-processing")) == BATCHES
        assert browser.evaluate(LAST_PULL) < 2_000
        assert browser.errors == []  # a Content-Security-Policy violation is reported here too
        # and the policy holds: an inline script is refused
        ran = browser.evaluate(
            "(() => { const s = document.createElement('script'); s.textContent = 'window.inlineRan = true';"
            " document.body.append(s); return window.inlineRan === true; })()"
        )
        assert ran is False
        browser.screenshot(tmp_path / "crowded.png")
    finally:
        browser.close()
        ui.close()
