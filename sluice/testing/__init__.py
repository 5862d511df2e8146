"""Test tools on real processes: moto's S3 server, a Spark standalone cluster, network namespaces,
fault campaigns and the estimator arena.

Like ``pyspark.testing``, this is not part of the services, nor of the demo: nothing under
``sluice.receiver``, ``sluice.tracker``, ``sluice.spark_driver`` or ``sluice.demo`` imports it.  Child
processes and the embedded brokers it builds on are :mod:`sluice.embedded`.  moto's server needs
the ``test`` extra.
"""

from sluice.testing.moto import MotoServer, start_moto

__all__ = ["MotoServer", "start_moto"]
