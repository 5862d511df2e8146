"""The streaming page: Spark's Streaming tab for Sluice, served by the driver.

:func:`serve_driver` gives a :class:`~sluice.spark_driver.driver.StreamingDriver` its page
(``sluice-driver`` calls it with ``driver.ui_host`` and ``driver.ui_port``); :func:`serve_query`
gives one to a Structured Streaming query that runs under :func:`~sluice.spark_driver.structured.admit`.
Both feed a :class:`StreamingStore`, which :class:`UIServer` serves as the page and as JSON shaped
like Spark's ``/api/v1/streaming`` (docs/reference/ui-api.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sluice.spark_driver.ui.hosts import parse_names
from sluice.spark_driver.ui.nodes import TrackerNodes, siblings_of
from sluice.spark_driver.ui.query import serve_query
from sluice.spark_driver.ui.server import UIServeError, UIServer
from sluice.spark_driver.ui.store import RecordedController, StreamingStore
from sluice.tracker.client.leader_finder import parse_addresses

__all__ = ["StreamingStore", "UIServer", "UIServeError", "serve_driver", "serve_query", "attach", "parse_names"]

log = logging.getLogger(__name__)

PORT_RETRIES = 16  # Spark's spark.port.maxRetries: a second driver on the host serves on the next port


def _status_of(source: Any) -> Any:
    """The tracker's ``status`` through the source's client; ``None`` for a source without a tracker."""
    client = getattr(source, "client", None)
    return None if client is None else client.status()


def _tracker_status(source: Any, tracker: str) -> Callable[[], Mapping[str, Any] | None]:
    """The page's tracker status: with several trackers configured, each one's leadership too."""
    addresses = parse_addresses(tracker)
    if len(addresses) == 1:
        return lambda: _status_of(source)
    return TrackerNodes(addresses, lambda: _status_of(source), siblings_of(lambda: source.client)).status


def attach(driver: Any) -> StreamingStore:
    """A store fed by ``driver``: its batches through a listener, its rate decisions through each
    stream's controller.  Call before ``driver.start()``: the in-flight sampler takes the
    controllers as they are when the driver starts."""
    source = driver.source
    tracker = getattr(source, "tracker", None)
    store = StreamingStore(
        driver.batch_interval_ms,
        tracker_status=_tracker_status(source, tracker) if tracker is not None else None,
        tracker_address=tracker,
    )
    driver.add_listener(store)
    controllers = driver.rate_loop.controllers
    for stream_id, controller in list(controllers.items()):
        controllers[stream_id] = RecordedController(controller, store, str(stream_id))
    return store


def serve_driver(driver: Any, host: str, port: int, allowed_hosts: Iterable[str] = ()) -> UIServer | None:
    """Attach a store to ``driver`` and serve its page on ``host:port``, or the first free port of the
    :data:`PORT_RETRIES` after it; ``None`` when port is 0 (off).  ``allowed_hosts``: names the page
    answers besides loopback and ``host`` (``driver.ui_allowed_hosts``)."""
    if port == 0:
        return None
    server = UIServer(attach(driver), host, port, port_retries=PORT_RETRIES, allowed_hosts=allowed_hosts)
    log.info("streaming page at %s", server.url)
    return server
