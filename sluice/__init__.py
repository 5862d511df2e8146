"""Sluice: receiver-based stream ingestion for PySpark with adaptive backpressure.

This package is the shared core every service builds on: the configuration schema and loader
(:mod:`sluice.config`), the wire and record types (:mod:`sluice.block_info`, :mod:`sluice.records`),
one clock (:mod:`sluice.clock`), durable file writes (:mod:`sluice.durable`) and the storage layer
(:mod:`sluice.storage`).  The services are its subpackages: :mod:`sluice.receiver`,
:mod:`sluice.tracker`, :mod:`sluice.estimators` and :mod:`sluice.spark_driver`.
"""

__version__ = "0.2.0"
