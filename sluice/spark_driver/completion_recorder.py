"""Records each finished batch at its source, and keeps the ones the tracker could not take.

A batch's completion is what lets the tracker forget the batch and hand its blocks back for
deletion.  If the tracker cannot be reached when a batch finishes (a failover, a store outage), a
completion dropped there would leave the batch allocated and its blocks in the store until the
driver restarts and re-runs it.  So a completion that fails for want of the tracker is kept and
sent again, oldest first, before the next batch's: the tracker records a completion once and
answers a repeat without effect.
"""

from __future__ import annotations

import logging
import threading

from sluice.spark_driver.batch import Batch, BatchInfo
from sluice.spark_driver.source import BatchSource

log = logging.getLogger(__name__)


class CompletionRecorder:
    """``record`` a finished batch at the source; one that met no tracker goes with the next."""

    def __init__(self, source: BatchSource) -> None:
        self.source = source
        self._unrecorded: dict[int, tuple[Batch, BatchInfo]] = {}
        self._lock = threading.Lock()  # one batch's completions at a time, in order

    @property
    def unrecorded(self) -> list[int]:
        """Batch times whose completion the tracker has not taken yet."""
        with self._lock:
            return sorted(self._unrecorded)

    def record(self, batch: Batch, info: BatchInfo) -> None:
        """Record the completions kept from before, then this one; stop at the first the tracker
        cannot take (it is kept).  Any other failure is logged and not retried: the batch stays
        pending at the source, which a restart re-runs."""
        with self._lock:
            self._unrecorded[batch.time_ms] = (batch, info)
            self._send(batch.time_ms, "it is sent again with the next batch's")

    def flush(self) -> None:
        """At stop: one more try for the completions kept; those left are re-run by the next start."""
        with self._lock:
            self._send(None, "the next start re-runs the batch")

    def _send(self, current: int | None, otherwise: str) -> None:
        for time_ms in sorted(self._unrecorded):
            kept, kept_info = self._unrecorded[time_ms]
            try:
                self.source.on_batch_completed(kept, kept_info)
            except ConnectionError as exc:
                log.warning("batch %d: completion not recorded yet (%s); %s", time_ms, exc, otherwise)
                return
            except Exception:
                log.exception("batch %d: the source could not record its completion; a restart re-runs it", time_ms)
            del self._unrecorded[time_ms]
            if time_ms != current:
                log.info("batch %d: completion recorded late", time_ms)
