"""Parts a pipeline runs on one machine: child processes on loopback and an embedded Kafka broker
(Apache Kafka's own, from its Maven jars; or tansu, which starts in milliseconds).

The demo starts a whole pipeline with these, and the tests and benchmarks start the same real
processes the same way, so there is one way to start, watch and stop them.  No service imports
this package: a tracker, a receiver or a driver never starts a broker or a child of its own.  The
test tools built on it (fault campaigns, network namespaces, moto's S3 server, a Spark standalone
cluster) are :mod:`sluice.testing`, which the demo does not import either.
"""

from sluice.embedded.kafka import DEFAULT_VERSION, OLDEST_VERSION, KafkaBroker, start_kafka
from sluice.embedded.kafka_config import Security
from sluice.embedded.processes import (
    ProcessError,
    TrackerProcess,
    driver_argv,
    free_port,
    receiver_argv,
    start_process,
    start_service,
    start_tracker,
    stop_process,
    tracker_argv,
    wait_for_port,
    wait_until,
)
from sluice.embedded.tansu import Broker, create_topic, start_broker, tansu_binary

__all__ = [
    "DEFAULT_VERSION",
    "OLDEST_VERSION",
    "Broker",
    "KafkaBroker",
    "Security",
    "ProcessError",
    "TrackerProcess",
    "create_topic",
    "free_port",
    "driver_argv",
    "receiver_argv",
    "start_broker",
    "start_kafka",
    "start_process",
    "start_service",
    "start_tracker",
    "stop_process",
    "tracker_argv",
    "tansu_binary",
    "wait_for_port",
    "wait_until",
]
