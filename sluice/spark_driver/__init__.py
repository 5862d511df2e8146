"""PySpark driver: batches from tracked blocks (or direct Kafka), job scheduling, triggers and the
rate-control loop.

The batch and source contract (:mod:`sluice.spark_driver.batch`, :mod:`sluice.spark_driver.source`,
shared with the direct-Kafka mode) imports neither the tracker client nor PySpark; the driver and
its scheduler load on first use (:mod:`sluice._exports`).  ``__all__`` is the supported API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._exports import lazy_exports
from sluice.spark_driver.batch import Batch, BatchInfo
from sluice.spark_driver.source import BatchSource, SourceContext, SourceError

if TYPE_CHECKING:
    from sluice.spark_driver.driver import StreamingDriver
    from sluice.spark_driver.job_scheduler import BatchFailedError
else:
    __getattr__ = lazy_exports(
        __name__,
        {
            "StreamingDriver": "sluice.spark_driver.driver",
            "BatchFailedError": "sluice.spark_driver.job_scheduler",
        },
    )

__all__ = ["Batch", "BatchFailedError", "BatchInfo", "BatchSource", "SourceContext", "SourceError", "StreamingDriver"]
