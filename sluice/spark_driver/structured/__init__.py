"""Sluice for Structured Streaming: Python Data Sources and feedback admission control.

* ``format("sluice")`` (:mod:`.source`): the tracker's queued blocks, offsets are block numbers;
* ``format("sluice-kafka")`` (:mod:`.kafka`): direct Kafka in pure Python, offsets per partition;
* :mod:`.admission`: the query's progress feeds Sluice's estimators, and the rate bounds both the
  receivers and each micro-batch.

``register(spark)`` registers both sources on a session (classic or Spark Connect).  Imports are
lazy so that ``import sluice.spark_driver.structured`` needs no pyarrow until a source is used.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["register", "admit", "workers_python"]

log = logging.getLogger(__name__)

PYSPARK_DEFAULT_PYTHON = "python3"  # SparkContext.pythonExec when PYSPARK_PYTHON is unset


def register(spark: Any) -> None:
    """Register ``sluice`` and ``sluice-kafka`` with ``spark.dataSource`` (one line per session),
    after :func:`workers_python` has chosen the interpreter the sources' Python workers run."""
    # the sources load pyspark and pyarrow: only register() needs them, not an import of the package
    from sluice.spark_driver.structured.kafka import SluiceKafkaDataSource
    from sluice.spark_driver.structured.source import SluiceDataSource

    workers_python(spark)
    spark.dataSource.register(SluiceDataSource)
    spark.dataSource.register(SluiceKafkaDataSource)


def workers_python(spark: Any) -> str | None:
    """Make a local session's Python workers run this interpreter unless something chose one.

    PySpark fixes the workers' interpreter when the SparkContext starts: ``PYSPARK_PYTHON``, else
    ``python3`` from PATH, which outside an activated venv is an interpreter without Sluice; the
    query then dies in its first Python worker with ``No module named 'sluice'`` inside a Java stack
    trace.  A data source captures the interpreter when it is registered, so setting it here is
    enough.  On a local master the workers run on this host, so this interpreter (or
    ``spark.pyspark.python``, if set) is the right one; on a cluster the executors' interpreter is
    theirs to choose (``PYSPARK_PYTHON``, ``spark.pyspark.python``) and nothing changes.  A Spark
    Connect session has no SparkContext here: the server's settings apply.  Returns the interpreter
    chosen, or ``None`` when it was left alone.
    """
    try:
        sc = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect refuses sparkContext: the server decides
        return None
    if os.environ.get("PYSPARK_PYTHON") or sc.pythonExec != PYSPARK_DEFAULT_PYTHON:
        return None
    chosen = sc.getConf().get("spark.pyspark.python", None)
    if chosen is None and sc.master.startswith("local"):
        chosen = sys.executable
    if chosen is None:
        return None
    sc.pythonExec = chosen
    log.info("Spark's Python workers run %s (PYSPARK_PYTHON is not set)", chosen)
    return chosen


def admit(spark: Any, **kwargs: Any) -> Any:
    """Start feedback admission control for a query: see :func:`.admission.start_admission`.

    (Not named ``admission``: importing the :mod:`.admission` module sets that package attribute.)"""
    # the admission module loads pyspark: only admit() needs it, not an import of the package
    from sluice.spark_driver.structured.admission import start_admission

    return start_admission(spark, **kwargs)
