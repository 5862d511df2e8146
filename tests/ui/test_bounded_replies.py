"""Every reply of the streaming API is bounded, whatever the store holds: a full store (1,000
batches, 2,000 decisions, 1,005 receivers) over a real server, each list paged with a stated
maximum, and the changes since a version carrying only what changed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.spark_driver.ui import UIServer
from sluice.spark_driver.ui.routes import MAX_BATCHES, MAX_CHANGES, MAX_RATES, MAX_RECEIVERS, MAX_RECEIVERS_LIGHT
from sluice.spark_driver.ui.store import StreamingStore
from tests.ui.crowded import BATCHES, DECISIONS, RECEIVERS, START_MS, add_batch, crowded_store

API = "api/v1/streaming/"


@pytest.fixture(scope="module")
def store() -> StreamingStore:
    return crowded_store()


@pytest.fixture(scope="module")
def server(store: StreamingStore) -> Iterator[UIServer]:
    ui = UIServer(store, "127.0.0.1", 0)
    yield ui
    ui.close()


def fetch(server: UIServer, path: str) -> tuple[Any, int]:
    """The JSON of ``path`` and the reply's size in bytes."""
    with urllib.request.urlopen(server.url + API + path, timeout=30) as response:
        body = response.read()
    return json.loads(body), len(body)


def refused(server: UIServer, path: str) -> str:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(server.url + API + path, timeout=30)
    assert caught.value.code == 400
    return json.load(caught.value)["error"]


@pytest.mark.slow
def test_receivers_come_a_bounded_page_at_a_time(server) -> None:
    first, size = fetch(server, "receivers")
    assert len(first) == MAX_RECEIVERS and size < 500_000  # the whole list was 16.8 MB
    assert all(len(r["eventRates"]) == BATCHES for r in first)  # Spark's field, whole, for the page's receivers
    seen = []
    for offset in range(0, RECEIVERS, MAX_RECEIVERS_LIGHT):
        rows, _ = fetch(server, f"receivers?offset={offset}&eventRates=false")
        seen += [r["receiverId"] for r in rows]
    assert seen == [f"r-{i:04d}" for i in range(RECEIVERS)]  # in id order, each once
    light, size = fetch(server, "receivers?eventRates=false")
    assert len(light) == MAX_RECEIVERS_LIGHT and size < 50_000
    assert light[0]["eventRates"] is None and light[0]["avgEventRate"] == 10.0
    assert refused(server, f"receivers?length={MAX_RECEIVERS + 1}") == (
        f"length='{MAX_RECEIVERS + 1}' is not allowed: expected an integer from 1 to {MAX_RECEIVERS}"
    )
    assert "from 1 to 100" in refused(server, f"receivers?eventRates=false&length={MAX_RECEIVERS_LIGHT + 1}")
    assert refused(server, "receivers?eventRates=yes") == "eventRates='yes' is not allowed: expected true or false"


def test_batches_and_rates_are_paged_newest_first(server) -> None:
    newest, size = fetch(server, "batches")
    assert len(newest) == MAX_BATCHES and size < 100_000
    assert newest[0]["batchId"] == START_MS + (BATCHES - 1) * 1000
    following, _ = fetch(server, f"batches?offset={MAX_BATCHES}&length=10")
    assert [b["batchId"] for b in following] == [newest[-1]["batchId"] - 1000 * (i + 1) for i in range(10)]
    assert fetch(server, f"batches?offset={BATCHES}")[0] == []
    assert "expected an integer from 1 to 100" in refused(server, "batches?length=1000")
    assert "expected an integer from 0 to" in refused(server, "batches?offset=-1")
    rates, _ = fetch(server, "rates")
    assert len(rates) == MAX_RATES and rates[-1]["timeMs"] == START_MS + (DECISIONS - 1) * 500  # the newest, in order
    older, _ = fetch(server, f"rates?offset={MAX_RATES}&length=2")
    assert [r["timeMs"] for r in older] == [rates[0]["timeMs"] - 1000, rates[0]["timeMs"] - 500]


def test_the_changes_since_a_version_page_through_the_store_then_carry_only_what_is_new() -> None:
    store = crowded_store()
    ui = UIServer(store, "127.0.0.1", 0)
    try:
        batches: dict[int, dict] = {}
        rates: list[dict] = []
        since, pages = 0, 0
        while True:  # from nothing: every retained batch and decision, in pages of the stated size
            changes, size = fetch(ui, f"changes?since={since}")
            pages += 1
            assert len(changes["batches"]) + len(changes["rates"]) <= MAX_CHANGES and size < 300_000
            batches.update((b["batchId"], b) for b in changes["batches"])
            rates += changes["rates"]
            since = changes["version"]
            if not changes["more"]:
                break
        assert (len(batches), len(rates), pages) == (BATCHES, DECISIONS, -(-(BATCHES + DECISIONS) // MAX_CHANGES))
        assert [r["timeMs"] for r in rates] == [START_MS + i * 500 for i in range(DECISIONS)]
        epoch = changes["epoch"]
        quiet, size = fetch(ui, f"changes?since={since}&epoch={epoch}")
        assert (quiet["batches"], quiet["removed"], quiet["rates"], quiet["version"]) == ([], [], [], since)
        # one more batch: it alone, and the oldest, let go to keep a thousand, named as removed
        add_batch(store, START_MS + BATCHES * 1000)
        new, size = fetch(ui, f"changes?since={since}&epoch={epoch}")
        assert [b["batchId"] for b in new["batches"]] == [START_MS + BATCHES * 1000] and size < 2_000
        assert new["removed"] == [START_MS] and not new["reset"]
        # another store's epoch (a restarted driver), or a version it never had: start again
        assert fetch(ui, f"changes?since={since}&epoch={epoch + 1}")[0]["reset"]
        assert fetch(ui, f"changes?since={new['version'] + 1}")[0]["reset"]
    finally:
        ui.close()


def test_a_reader_further_behind_than_the_removals_kept_is_told_to_start_again() -> None:
    store = StreamingStore(1000, retained_batches=3)
    for i in range(4):
        add_batch(store, 1000 * (i + 1))
    behind = store.version
    assert store.changes(behind, 10).removed == [] and not store.changes(behind, 10).reset
    for i in range(4, 8):  # four more removals: more than the three kept, one of them not listed any more
        add_batch(store, 1000 * (i + 1))
    old = store.changes(behind, 10)
    assert old.reset and [info.batch_time_ms for info, _ in old.batches] == [6000, 7000, 8000]
    recent = store.changes(store.version - 1, 10)
    assert not recent.reset
