"""The streaming page for a Structured Streaming query under Sluice's admission control.

A query has no ``StreamingDriver``: its batches are the query's progress events and its rate
decisions those of the admission's ``RateController``.  :func:`serve_query` adds a
``StreamingQueryListener`` that turns each progress of the named query into the ``BatchInfo``
admission control itself computes (batch due at the trigger boundary, so a late start shows as
scheduling delay), and notes the controller's answers through
:class:`~sluice.spark_driver.ui.store.RecordedController`.  Usage::

    admission = admit(spark, query_name="words", options=options)
    page = serve_query(spark, admission, query_name="words", port=4050)
    ...
    page.stop()
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sluice.spark_driver.batch import BatchInfo
from sluice.spark_driver.ui.server import UIServer
from sluice.spark_driver.ui.store import RecordedController, StreamingStore

log = logging.getLogger(__name__)


@dataclass
class QueryPage:
    """A query's page: its store, its server, and the listener feeding them."""

    store: StreamingStore
    server: UIServer
    listener: Any
    spark: Any

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        """Remove the listener and close the server."""
        self.spark.streams.removeListener(self.listener)
        self.server.close()


def serve_query(
    spark: Any,
    admission: Any,
    *,
    query_name: str,
    host: str = "127.0.0.1",
    port: int = 4050,
    tracker_status: Any = None,
    allowed_hosts: Iterable[str] = (),
) -> QueryPage:
    """Serve the page of the query named ``query_name`` on ``host:port`` (0: a free port).

    :param admission: what :func:`~sluice.spark_driver.structured.admit` returned for that query.
    :param tracker_status: a callable returning the tracker's ``status`` reply, for the receivers
        and tracker sections; ``None``: those stay empty.
    :param allowed_hosts: names the page answers besides loopback and ``host``.
    """
    # pyspark's listener and the admission module load only when a query's page is attached
    from pyspark.sql.streaming.listener import StreamingQueryListener

    from sluice.spark_driver.structured.admission import progress_of

    control = admission.control_
    store = StreamingStore(control.trigger_interval_ms, tracker_status=tracker_status)
    control.controller = RecordedController(control.controller, store, query_name)
    lock = threading.Lock()
    last_start: list[int] = []

    class QueryPageListener(StreamingQueryListener):
        """Each progress of the query as a completed batch in the store."""

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            data = json.loads(event.progress.json)
            progress = progress_of(data) if data.get("name") == query_name else None
            if progress is None:
                return
            with lock:
                due = progress.start_ms if not last_start else min(control.due_ms(last_start[0]), progress.start_ms)
                last_start[:] = [progress.start_ms]
            info = BatchInfo(
                batch_time_ms=due,
                num_records=progress.input_rows,
                submission_time_ms=due,
                processing_start_ms=progress.start_ms,
                processing_end_ms=progress.start_ms + progress.duration_ms,
                status="succeeded",
            )
            store.on_batch_completed(info)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    server = UIServer(store, host, port, allowed_hosts=allowed_hosts)
    listener = QueryPageListener()
    spark.streams.addListener(listener)
    log.info("streaming page of query %s at %s", query_name, server.url)
    return QueryPage(store, server, listener, spark)
