"""The ``kafka.client`` table (and ``sluice-kafka``'s ``kafkaClientOptions``) as aiokafka settings.

Every Sluice consumer, the receivers', direct mode's on the driver and in its tasks and
``sluice-kafka``'s, is built through :func:`consumer_options`, and every producer (``Batch.write_kafka``'s,
in its tasks) through :func:`producer_options`, so TLS configured once in a TOML file works on every
path.  It converts where the consumer is built: an ``ssl.SSLContext`` does not
pickle, so options travel to Spark tasks as given.

Credentials need not sit in the table: ``sasl_plain_password_file = "/run/secrets/kafka"`` reads
the password from a file (a Kubernetes secret mount, a systemd credential) and
``sasl_plain_password_env = "KAFKA_PASSWORD"`` from an environment variable, and so for every key
of :data:`~sluice.redaction.CREDENTIAL_KEYS`.  Both are read where the consumer is built, like ``ssl_cafile``: in
direct mode and ``sluice-kafka`` the file or variable must exist on every executor too, and only
its name travels in the task closures and Spark's query plan (which show ``kafkaClientOptions`` as
given: Spark's ``spark.redaction.regex`` matches option names, not a JSON value's content).
A file is read with :func:`sluice.files.read_small_file` (a regular file, bounded), one trailing
line end dropped.  :func:`~sluice.redaction.redacted` is the table as a log line or a page may show it.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Mapping
from typing import Any

from sluice.config_key import ConfigError
from sluice.files import read_small_file
from sluice.redaction import CREDENTIAL_KEYS

__all__ = ["consumer_options"]

_SSL_FILE_KEYS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password")
_MAX_CREDENTIAL_BYTES = 64 << 10


@functools.cache
def client_keywords(client_class: type) -> frozenset[str]:
    """The settings an aiokafka client takes: its constructor's keyword parameters, read from its
    signature, so which client takes which setting is aiokafka's word, never a list kept here that
    a new aiokafka release would outdate."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in inspect.signature(client_class).parameters.values() if p.kind in kinds)


def producer_options(client: Mapping[str, Any]) -> dict[str, Any]:
    """The table as aiokafka producer keyword arguments: :func:`consumer_options` without the
    settings only a consumer takes, so one ``[kafka.client]`` table serves both sides (its
    connection, TLS and SASL settings are what they share).  A key neither client takes is kept,
    so the producer refuses it by name."""
    # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    consumer_only = client_keywords(AIOKafkaConsumer) - client_keywords(AIOKafkaProducer)
    return {k: v for k, v in consumer_options(client).items() if k not in consumer_only}


def consumer_options(client: Mapping[str, Any]) -> dict[str, Any]:
    """The table as aiokafka keyword arguments.

    Passed on unchanged (``security_protocol``, ``sasl_mechanism``, ``sasl_plain_username`` ...),
    except that a credential's ``_file`` / ``_env`` form becomes its value, and
    ``ssl_cafile`` / ``ssl_certfile`` / ``ssl_keyfile`` / ``ssl_password``, which a TOML file can
    hold but aiokafka does not accept, become an ``ssl_context``.  Applying it twice changes
    nothing.  A missing file or variable, or both forms of one key, is a ConfigError naming it.
    """
    options = _with_credentials(client)
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


def _with_credentials(client: Mapping[str, Any]) -> dict[str, Any]:
    """``client`` with each credential's ``_file`` or ``_env`` form replaced by the value it names."""
    options = dict(client)
    for key in CREDENTIAL_KEYS:
        path, variable = options.pop(f"{key}_file", None), options.pop(f"{key}_env", None)
        given = [f"kafka.client.{form}" for form, v in ((key, options.get(key)), (f"{key}_file", path)) if v]
        given += [f"kafka.client.{key}_env"] if variable else []
        if len(given) > 1:
            raise ConfigError(f"{' and '.join(given)} both set: give the credential one way")
        if path:
            raw = read_small_file(str(path), f"kafka.client.{key}_file", _MAX_CREDENTIAL_BYTES)
            options[key] = _one_line_end_dropped(raw.decode("utf-8", errors="strict"))
        elif variable:
            value = os.environ.get(str(variable))
            if not value:
                raise ConfigError(f"kafka.client.{key}_env: the environment variable {variable} is not set or empty")
            options[key] = value
    return options


def _one_line_end_dropped(text: str) -> str:
    """A file written by ``echo`` ends in a newline that is not part of the secret."""
    for end in ("\r\n", "\n"):
        if text.endswith(end):
            return text[: -len(end)]
    return text
