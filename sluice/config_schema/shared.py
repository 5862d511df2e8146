"""What the sections' keys share: defaults several of them use, checks, the trigger names, and the
keys every service has."""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import urlparse

from sluice.config_key import (
    Key,
)
from sluice.logs import LEVELS
from sluice.plugins import registry

# Spark's spark.streaming.backpressure.pid.{proportional,integral,derived,minRate} defaults: the
# estimator.pid.* keys, the pid factory and PIDRateEstimator all take them from here.
PID_DEFAULTS: dict[str, float] = {"proportional": 1.0, "integral": 0.2, "derived": 0.0, "min_rate": 100.0}

# Where receivers write blocks, and so the one store the tracker and the driver accept by default:
# each service resolves the relative path against its own working directory when it starts.
DEFAULT_BLOCK_STORE = "file://./sluice-blocks"


def is_store_urls(value: str) -> bool:
    """One or more URLs, comma-separated, each of a registered block store's scheme."""
    urls = [url.strip() for url in value.split(",") if url.strip()]
    stores = registry("sluice_register_block_stores").available()
    return bool(urls) and all(urlparse(url).scheme in stores for url in urls)


def is_weight(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def is_stream_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**31 - 1


class Trigger(StrEnum):
    """When batches start (``driver.trigger``); :mod:`sluice.spark_driver.triggers` has one policy each."""

    FIXED = "fixed"
    PROCESSING_TIME = "processing-time"
    ONCE = "once"
    AVAILABLE_NOW = "available-now"


KEYS: tuple[Key, ...] = (
    Key(
        "log",
        "level",
        str,
        "INFO",
        "lowest level of the log lines a service writes",
        check=lambda v: v.upper() in LEVELS,
        allowed="one of " + ", ".join(LEVELS) + " (any case)",
    ),
)


def metrics_addr_key(section: str) -> Key:
    """``<section>.metrics_addr``: the services that serve metrics bind them alike."""
    return Key(
        section,
        "metrics_addr",
        str,
        "127.0.0.1",
        "address the metrics port binds (0.0.0.0: every interface; across a network, give it a metrics_web_config)",
    )


def metrics_web_config_key(section: str) -> Key:
    """``<section>.metrics_web_config``: TLS and basic auth on any service's metrics port."""
    return Key(
        section,
        "metrics_web_config",
        str,
        "",
        "exporter-toolkit web configuration file (YAML): TLS and basic auth on the metrics port (empty: plain HTTP)",
    )


def tracker_client_keys(section: str) -> tuple[Key, ...]:
    """How a client of the tracker (a receiver worker, the driver) proves itself to it."""
    return (
        Key(section, "auth_token_file", str, "", "file holding the tracker's auth token"),
        Key(section, "tls_ca", str, "", "CA (PEM) that signed the tracker's certificate: TLS to the tracker"),
        Key(section, "tls_cert", str, "", "client certificate (PEM) shown to the tracker"),
        Key(section, "tls_key", str, "", "client certificate's private key (PEM)"),
    )
