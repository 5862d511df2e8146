"""Tests against Apache Kafka's own broker (:mod:`sluice.embedded.kafka`), run from its Maven jars."""
