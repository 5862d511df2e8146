"""The ``kafka.client`` table (and ``sluice-kafka``'s ``kafkaClientOptions``) as aiokafka settings.

Every Sluice consumer, the receivers', direct mode's on the driver and in its tasks and
``sluice-kafka``'s, is built through :func:`consumer_options`, so TLS configured once in a TOML file
works on every path.  It converts where the consumer is built: an ``ssl.SSLContext`` does not
pickle, so options travel to Spark tasks as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_SSL_FILE_KEYS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password")


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
