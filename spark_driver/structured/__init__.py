"""Sluice for Structured Streaming: Python Data Sources and feedback admission control.

* ``format("sluice")`` (:mod:`.source`): the tracker's queued blocks, offsets are block numbers;
* ``format("sluice-kafka")`` (:mod:`.kafka`): direct Kafka in pure Python, offsets per partition;
* :mod:`.admission`: the query's progress feeds Sluice's estimators, and the rate bounds both the
  receivers and each micro-batch.

``register(spark)`` registers both sources on a session (classic or Spark Connect).  Imports are
lazy so that ``import sluice.spark_driver.structured`` needs no pyarrow until a source is used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register", "admit"]


def register(spark: Any) -> None:
    """Register ``sluice`` and ``sluice-kafka`` with ``spark.dataSource`` (one line per session)."""
    from sluice.spark_driver.structured.kafka import SluiceKafkaDataSource
    from sluice.spark_driver.structured.source import SluiceDataSource

    spark.dataSource.register(SluiceDataSource)
    spark.dataSource.register(SluiceKafkaDataSource)


def admit(spark: Any, **kwargs: Any) -> Any:
    """Start feedback admission control for a query: see :func:`.admission.start_admission`.

    (Not named ``admission``: importing the :mod:`.admission` module sets that package attribute.)"""
    from sluice.spark_driver.structured.admission import start_admission

    return start_admission(spark, **kwargs)
