"""The ``kafka.client`` table (and ``sluice-kafka``'s ``kafkaClientOptions``) as aiokafka settings.

Every Sluice consumer, the receivers', direct mode's on the driver and in its tasks and
``sluice-kafka``'s, is built through :func:`consumer_options`, and every producer (``Batch.write_kafka``'s,
in its tasks) through :func:`producer_options`, so TLS configured once in a TOML file works on every
path.  It converts where the consumer is built: an ``ssl.SSLContext`` does not
pickle, so options travel to Spark tasks as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_SSL_FILE_KEYS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password")


# consumer settings a TOML table may hold that aiokafka's producer refuses as unknown keywords
_CONSUMER_ONLY = frozenset(
    {
        "group_id", "group_instance_id", "fetch_max_wait_ms", "fetch_max_bytes", "fetch_min_bytes",
        "max_partition_fetch_bytes", "max_poll_records", "max_poll_interval_ms", "auto_offset_reset",
        "enable_auto_commit", "auto_commit_interval_ms", "check_crcs", "partition_assignment_strategy",
        "session_timeout_ms", "heartbeat_interval_ms", "consumer_timeout_ms", "rebalance_timeout_ms",
        "isolation_level", "exclude_internal_topics", "key_deserializer", "value_deserializer",
    }
)  # fmt: skip


def producer_options(client: Mapping[str, Any]) -> dict[str, Any]:
    """The table as aiokafka producer keyword arguments: :func:`consumer_options` without the
    settings only a consumer takes, so one ``[kafka.client]`` table serves both sides (its
    connection, TLS and SASL settings are what they share)."""
    return {k: v for k, v in consumer_options(client).items() if k not in _CONSUMER_ONLY}


def consumer_options(client: Mapping[str, Any]) -> dict[str, Any]:
    """The table as aiokafka keyword arguments.

    Passed on unchanged (``security_protocol``, ``sasl_mechanism``, ``sasl_plain_username`` ...),
    except that ``ssl_cafile`` / ``ssl_certfile`` / ``ssl_keyfile`` / ``ssl_password``, which a TOML
    file can hold but aiokafka does not accept, become an ``ssl_context``.  Applying it twice
    changes nothing.
    """
    options = dict(client)
    files = {k: options.pop(k) for k in _SSL_FILE_KEYS if k in options}
    if files and "ssl_context" not in options:
        # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
        from aiokafka.helpers import create_ssl_context

        options["ssl_context"] = create_ssl_context(
            cafile=files.get("ssl_cafile"),
            certfile=files.get("ssl_certfile"),
            keyfile=files.get("ssl_keyfile"),
            password=files.get("ssl_password"),
        )
    return options
