"""A BatchSource test double: an in-memory queue of records instead of a tracker and a block store.

It implements the real protocol (no mocking of the driver's own parts), so the job generator,
scheduler and driver run exactly as with the tracker-backed source.
"""

from __future__ import annotations

import threading
from typing import Any

from sluice.spark_driver.batch import Batch, BatchInfo
from sluice.spark_driver.source import SourceContext


class MemorySource:
    """Records offered by the test become batches; rates are recorded; recovery is scripted."""

    def __init__(
        self, recovered: dict[int, list[Any]] | None = None, last_rate: float | None = None, use_rate: bool = False
    ) -> None:
        self.lock = threading.Lock()
        self.offered: list[Any] = []
        self.recovered = dict(recovered or {})
        self.batches: dict[int, list[Any]] = {}
        self.completed: list[BatchInfo] = []
        self.published: list[tuple[int, float]] = []
        self.last_rate = last_rate
        self.use_rate = use_rate
        self.context: SourceContext | None = None
        self.events: list[str] = []
        self.stopped = False

    # -- test side -----------------------------------------------------------------------------
    def offer(self, records: list[Any]) -> None:
        with self.lock:
            self.offered.extend(records)

    # -- BatchSource -------------------------------------------------------------------------------
    def start(self, context: SourceContext) -> None:
        self.context = context
        self.events.append("start")

    def latest_published_rate(self, stream_id: int = 0) -> float | None:
        return self.last_rate

    def recover(self) -> list[int]:
        self.events.append("recover")
        return sorted(self.recovered)

    def _batch(self, t: int, records: list[Any]) -> Batch:
        spark = self.context.spark if self.context else None
        rdd = spark.sparkContext.parallelize(records, max(1, min(len(records), 2))) if spark else records
        # without Spark the batch holds the records as a list (the tests' functions only iterate it)
        return Batch(t, rdd, spark, num_records=len(records), stream_records={0: len(records)})  # type: ignore[arg-type]

    def rebuild_batch(self, batch_time_ms: int) -> Batch:
        self.events.append(f"rebuild {batch_time_ms}")
        records = self.recovered.pop(batch_time_ms)
        self.batches[batch_time_ms] = records
        return self._batch(batch_time_ms, records)

    def create_batch(self, batch_time_ms: int, rate: float | None) -> Batch | None:
        self.events.append(f"create {batch_time_ms} rate={rate}")
        with self.lock:
            if self.use_rate and rate and self.context:
                limit = int(rate * self.context.batch_interval_ms / 1000)
                records, self.offered = self.offered[:limit], self.offered[limit:]
            else:
                records, self.offered = self.offered, []
        self.batches[batch_time_ms] = records
        return self._batch(batch_time_ms, records)

    def on_batch_completed(self, batch: Batch, info: BatchInfo) -> None:
        self.completed.append(info)

    def publish_rate(self, rate: float, stream_id: int = 0) -> None:
        self.published.append((stream_id, rate))
        self.last_rate = rate

    def has_more_available(self) -> bool:
        with self.lock:
            return bool(self.offered)

    def stop(self) -> None:
        self.stopped = True
        self.events.append("stop")
