"""``kafka.client`` written as a TOML file would (TLS files by path) works in direct mode on the
driver and in its Spark tasks: the file keys become an SSL context where each consumer is built.
tansu here speaks plaintext, which ignores the context, so a consumer given the raw file keys
(which aiokafka refuses) fails while a converted one reads."""

from __future__ import annotations

import pytest

from sluice.embedded.certs import self_signed
from tests.direct.conftest import complete, produce

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


def test_tls_files_in_the_client_table_reach_every_consumer(kafka_broker, make_source, tmp_path) -> None:
    pair = self_signed(tmp_path, common_name="test")
    key, cert = pair.key, pair.cert
    topic = kafka_broker.create_topic(2)
    produce(kafka_broker.bootstrap, topic, {0: 3, 1: 2})
    client = {
        "security_protocol": "PLAINTEXT",
        "ssl_cafile": str(cert),
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
    }
    source = make_source(topic, auto_offset_reset="earliest", client_options=client)
    batch = source.create_batch(1000, None)  # the driver's consumers
    assert sorted(r.value for r in complete(source, batch)) == [b"v-0-0", b"v-0-1", b"v-0-2", b"v-1-0", b"v-1-1"]
