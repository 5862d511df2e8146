"""PySpark driver: batches from tracked blocks (or direct Kafka), job scheduling, triggers and the
rate-control loop.

Imports are lazy so that ``sluice.spark_driver.source``/``sluice.spark_driver.batch`` (the contract with the
direct-Kafka mode) load without pulling in the tracker client or PySpark.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StreamingDriver", "Batch", "BatchInfo", "BatchSource", "SourceContext"]


def __getattr__(name: str) -> Any:
    if name == "StreamingDriver":
        from sluice.spark_driver.driver import StreamingDriver

        return StreamingDriver
    if name in ("Batch", "BatchInfo"):
        from sluice.spark_driver import batch

        return getattr(batch, name)
    if name in ("BatchSource", "SourceContext"):
        from sluice.spark_driver import source

        return getattr(source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
