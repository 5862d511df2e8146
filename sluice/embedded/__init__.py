"""Parts a pipeline runs on one machine: child processes on loopback and an embedded Kafka broker.

The demo starts a whole pipeline with these, and the tests and benchmarks start the same real
processes the same way, so there is one way to start, watch and stop them.  No service imports
this package: a tracker, a receiver or a driver never starts a broker or a child of its own.  The
test tools built on it (fault campaigns, network namespaces, moto's S3 server, a Spark standalone
cluster) are :mod:`sluice.testing`, which the demo does not import either.
"""

from sluice.embedded.processes import (
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
from sluice.embedded.tansu import Broker, create_topic, start_broker, tansu_binary

__all__ = [
    "Broker",
    "ProcessError",
    "TrackerProcess",
    "create_topic",
    "free_port",
    "start_broker",
    "start_process",
    "start_service",
    "start_tracker",
    "stop_process",
    "tansu_binary",
    "wait_for_port",
    "wait_until",
]
