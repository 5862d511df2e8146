"""The streaming API's paths and parameters: each checked and bounded, then answered from the store.

Every list is paged and every page has a stated maximum, so no request costs more than one page's
work, whatever the store holds: ``batches`` and ``receivers`` take Spark's ``offset`` and
``length`` (as its REST API pages a stage's tasks), ``rates`` the same counted back from the
newest, and ``changes`` (Sluice's) a version cursor, so the page asks for what changed since it
last asked.  A parameter or a batch id that is not allowed is a :class:`BadRequest` naming what is
allowed; an id is read only once it is known to be short digits, as an ``int`` of thousands of
digits is refused by Python itself (its int-string conversion limit) after costing the parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.errors import SluiceError
from sluice.spark_driver.ui import api
from sluice.spark_driver.ui.store import StreamingStore

PREFIX = "/api/v1/streaming/"
MAX_BATCHES = 100  # batches a page of `batches` holds at most (and by default)
MAX_RECEIVERS = 20  # receivers a page of `receivers` holds: each carries up to 1000 event rates
MAX_RECEIVERS_LIGHT = 100  # ... and with eventRates=false, each a row of a few hundred bytes
MAX_RATES = 500  # decisions a page of `rates` holds
MAX_CHANGES = 250  # batches, removals and decisions a `changes` reply holds together
ID_DIGITS = 19  # a batch id is epoch milliseconds, a 64-bit integer as Spark's batchId (a Long)
MAX_COUNTER = 2**63 - 1


class NotFound(SluiceError, LookupError):
    """A path or batch the API does not have (answered 404)."""


class BadRequest(SluiceError, ValueError):
    """A query parameter or batch id the API does not allow (answered 400)."""


def shown(text: str, limit: int = 40) -> str:
    """``text`` as an error quotes it: a hostile kilobyte is cut to its start and its length."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}… ({len(text)} characters)"


def integer(query: Mapping[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    """The parameter ``name`` as an integer from ``low`` to ``high``, or ``default`` when absent."""
    values = query.get(name)
    if not values:
        return default
    text = values[0]
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(high)) and low <= int(text) <= high):
        raise BadRequest(f"{name}={shown(text)} is not allowed: expected an integer from {low} to {high}")
    return int(text)


def page(query: Mapping[str, list[str]], maximum: int) -> tuple[int, int]:
    """``offset`` (0 on) and ``length`` (1 to ``maximum``, which it defaults to)."""
    return integer(query, "offset", 0, 0, MAX_COUNTER), integer(query, "length", maximum, 1, maximum)


def batch_id(key: str) -> int:
    if not (key.isascii() and key.isdigit() and len(key) <= ID_DIGITS and int(key) <= MAX_COUNTER):
        raise BadRequest(
            f"batch id {shown(key)} is not allowed: expected the batch time in epoch milliseconds, "
            f"at most {ID_DIGITS} digits"
        )
    return int(key)


def flag(query: Mapping[str, list[str]], name: str, default: bool) -> bool:
    values = query.get(name)
    if not values:
        return default
    if values[0] not in ("true", "false"):
        raise BadRequest(f"{name}={shown(values[0])} is not allowed: expected true or false")
    return values[0] == "true"


def route(store: StreamingStore, path: str, query: Mapping[str, list[str]]) -> Any:
    """The JSON answer for an API path (``PREFIX`` removed); raises :class:`NotFound` or :class:`BadRequest`."""
    interval = store.batch_interval_ms
    if path == "batches":
        wanted = query.get("status", [None])[0]
        if wanted is not None and wanted.lower() not in api.STATUS_FILTERS:
            raise BadRequest(f"status={shown(wanted)} is not allowed: expected one of {', '.join(api.STATUS_FILTERS)}")
        offset, length = page(query, MAX_BATCHES)
        kept = [
            (info, blocks)
            for info, blocks in reversed(store.batches())
            if wanted is None or api.batch_status(info) == wanted.upper()
        ]
        return [api.batch_json(info, blocks, interval) for info, blocks in kept[offset : offset + length]]
    if path.startswith("batches/"):
        key = path.removeprefix("batches/")
        found = store.batch(batch_id(key))
        if found is None:
            raise NotFound(f"no batch {key} (only the last {store.retained_batches} are kept)")
        return api.batch_detail(*found, interval)
    if path == "receivers":
        rates = flag(query, "eventRates", True)
        offset, length = page(query, MAX_RECEIVERS if rates else MAX_RECEIVERS_LIGHT)
        status, _ = store.tracker()
        entries = api.receiver_entries(status)[offset : offset + length]
        return api.receivers_json(entries, store.batches(), interval, event_rates=rates)
    if path == "statistics":
        status, _ = store.tracker()
        return api.statistics_json(
            [info for info, _ in store.batches()],
            store.totals(),
            api.receiver_entries(status),
            start_time_ms=store.start_time_ms,
            interval_ms=interval,
        )
    if path == "rates":
        offset, length = page(query, MAX_RATES)
        decisions = store.decisions()
        end = max(0, len(decisions) - offset)
        return api.decisions_json(decisions[max(0, end - length) : end])
    if path == "changes":
        since = integer(query, "since", 0, 0, MAX_COUNTER)
        epoch = integer(query, "epoch", -1, 0, MAX_COUNTER)
        limit = integer(query, "length", MAX_CHANGES, 1, MAX_CHANGES)
        changes = store.changes(since, limit, None if epoch < 0 else epoch)
        return api.changes_json(changes, interval, store.start_time_ms, store.retained_decisions)
    if path == "tracker":
        return api.tracker_json(*store.tracker(), store.tracker_address)
    raise NotFound(f"no endpoint {shown(PREFIX + path)}")
