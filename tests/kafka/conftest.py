"""The secured Apache Kafka broker the Kafka tests share: SCRAM logins and the StandardAuthorizer.

One per xdist worker (session scope), as ``kafka_broker``: starting a JVM broker takes seconds, and
every test takes its own topics, groups and ACLs.  Its PLAINTEXT listener (``bootstrap``) is the
harness's super user: topics are made, records produced and ACLs granted through it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.embedded.kafka import KafkaBroker, start_kafka
from sluice.embedded.kafka_config import Security

PASSWORD = "alice-Pw-7f3k9q"  # distinctive: any occurrence in a log or a status is a leak
USERS = {"alice": PASSWORD, "bob": "bob-secret"}


@pytest.fixture(scope="session")
def secure() -> Iterator[KafkaBroker]:
    broker = start_kafka(security=Security(users=USERS, listeners=("SASL_PLAINTEXT",), authorizer=True))
    yield broker
    broker.stop()
