"""One configuration schema for every Sluice service.

Each key is declared once here (section, name, type, default, what is allowed), so a TOML file, an
environment variable ``SLUICE_<SECTION>_<KEY>`` and a command-line flag all mean the same thing and
the configuration reference in docs/ is generated from the same list.  Precedence is :data:`PRECEDENCE`.
A bad value raises :class:`ConfigError` naming the key, the value and what is allowed, before any
service starts; so does a ``SLUICE_*`` variable that names no key (systemd and compose configure
Sluice through the environment, where a typo would otherwise be ignored).  Where the allowed values
are names of an extension point (``receiver.source``, ``estimator.name``, the scheme of
``receiver.block_store``) they come from that point's registry (:mod:`sluice.plugins`), so an
installed plugin is allowed without a change here.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from sluice.config_key import (
    HOST_PORT,
    NON_NEGATIVE,
    NONE_AT_ZERO,
    PORT,
    POSITIVE,
    ConfigError,
    Key,
    did_you_mean,
)
from sluice.logs import LEVELS

# Spark's spark.streaming.backpressure.pid.{proportional,integral,derived,minRate} defaults: the
# estimator.pid.* keys, the pid factory and PIDRateEstimator all take them from here.
PID_DEFAULTS: dict[str, float] = {"proportional": 1.0, "integral": 0.2, "derived": 0.0, "min_rate": 100.0}

PRECEDENCE = (
    "Precedence, highest first: a flag, then the environment (SLUICE_<SECTION>_<KEY>), then the "
    "--config TOML file, then the default. One exception, for rates: the driver starts from the rate "
    "the tracker remembers (the last one published) rather than backpressure.initial_rate, unless "
    "backpressure.resume_rate is false."
)


class Trigger(StrEnum):
    """When batches start (``driver.trigger``); :mod:`sluice.spark_driver.triggers` has one policy each."""

    FIXED = "fixed"
    PROCESSING_TIME = "processing-time"
    ONCE = "once"
    AVAILABLE_NOW = "available-now"


SCHEMA: tuple[Key, ...] = (
    # every service
    Key(
        "log",
        "level",
        str,
        "INFO",
        "lowest level of the log lines a service writes",
        check=lambda v: v.upper() in LEVELS,
        allowed="one of " + ", ".join(LEVELS) + " (any case)",
    ),
    # tracker service
    Key("tracker", "listen", str, "127.0.0.1:7100", "address the tracker serves RPC on", **HOST_PORT),
    Key("tracker", "wal_dir", str, "./sluice-wal", "directory of the tracker's write-ahead log"),
    Key("tracker", "metrics_port", int, 0, "Prometheus metrics port (0: no metrics server)", **PORT),
    Key("tracker", "auth_token_file", str, "", "file holding a full-access token (every role) for hello"),
    Key(
        "tracker",
        "receiver_token_file",
        str,
        "",
        "file holding a token that gives the receiver role only (register, heartbeat, add_block, "
        "report_error, deregister, status)",
    ),
    Key(
        "tracker",
        "driver_token_file",
        str,
        "",
        "file holding a token that gives the driver role only (allocate_blocks, get_blocks_of_batch, "
        "batch_completed, publish_rate, status)",
    ),
    Key("tracker", "tls_cert", str, "", "TLS certificate (PEM) for the RPC listener"),
    Key("tracker", "tls_key", str, "", "TLS private key (PEM) for the RPC listener"),
    Key(
        "tracker",
        "tls_client_ca",
        str,
        "",
        "CA (PEM) whose client certificates are required; a certificate's common name (receiver, driver, "
        "admin) is its role",
    ),
    Key(
        "tracker",
        "insecure",
        bool,
        False,
        "serve a non-loopback address without any token or client CA (refused otherwise)",
    ),
    Key(
        "tracker",
        "block_store",
        str,
        "",
        "block store URL(s), comma-separated, that block locations must lie in (empty: any store, the "
        "location still <store>/stream-<id>/<block>.blk)",
    ),
    Key("tracker", "max_connections", int, 1024, "connections beyond this are closed at once", **POSITIVE),
    Key("tracker", "hello_timeout_ms", int, 10_000, "a connection without hello after this is closed", **POSITIVE),
    Key("tracker", "idle_timeout_ms", int, 600_000, "a connection silent this long is closed", **POSITIVE),
    Key(
        "tracker",
        "max_batch_ahead_ms",
        int,
        86_400_000,
        "allocate_blocks refuses a batch time further than this past the tracker's clock",
        **POSITIVE,
    ),
    Key(
        "tracker",
        "max_frame_bytes",
        int,
        1 << 20,
        "largest RPC frame accepted",
        check=lambda v: 1024 <= v <= 1 << 30,
        allowed="an integer from 1024 to 1073741824",
    ),
    Key("tracker", "liveness_timeout_ms", int, 10_000, "a receiver silent this long is dead", **POSITIVE),
    Key(
        "tracker",
        "rate_split",
        str,
        "equal",
        "how a stream's rate is shared among its receivers",
        choices=("equal", "lag"),
    ),
    Key("tracker", "remember_ms", int, 60_000, "completed batches older than this are cleaned up", **POSITIVE),
    Key("tracker", "wal_segment_bytes", int, 64 << 20, "roll a WAL segment past this size", **POSITIVE),
    Key("tracker", "wal_segment_ms", int, 60_000, "roll a WAL segment past this age", **POSITIVE),
    # receiver workers
    Key("receiver", "tracker", str, "127.0.0.1:7100", "tracker address", **HOST_PORT),
    Key("receiver", "stream_id", int, 0, "stream the receivers feed", **NON_NEGATIVE),
    Key("receiver", "source", str, "kafka", "where records come from", plugins="sluice_register_sources"),
    Key("receiver", "source_options", dict, {}, "options passed to a plugin source"),
    Key("receiver", "receivers", int, 1, "receivers this worker runs as asyncio tasks", **POSITIVE),
    Key(
        "receiver",
        "max_rate",
        float,
        0.0,
        "records/s cap per receiver (spark.streaming.receiver.maxRate)",
        **NONE_AT_ZERO,
    ),
    Key(
        "receiver", "block_interval_ms", int, 200, "cut a block this often (spark.streaming.blockInterval)", **POSITIVE
    ),
    Key(
        "receiver",
        "block_queue_size",
        int,
        10,
        "blocks waiting to be pushed (spark.streaming.blockQueueSize)",
        **POSITIVE,
    ),
    Key(
        "receiver",
        "max_block_records",
        int,
        100_000,
        "store() waits when the buffer holds this many (Kafka records: only if max_block_bytes is 0)",
        **POSITIVE,
    ),
    Key(
        "receiver",
        "max_block_bytes",
        int,
        64 << 20,
        "store() waits when the buffer holds this many bytes (encoded Kafka records, text or bytes records)",
        **NONE_AT_ZERO,
    ),
    Key(
        "receiver",
        "block_store",
        str,
        "file://./sluice-blocks",
        "URL of the block store",
        plugins="sluice_register_block_stores",
        scheme=True,
    ),
    Key("receiver", "restart_delay_ms", int, 2000, "wait before restarting a failed receiver", **NON_NEGATIVE),
    Key("receiver", "heartbeat_interval_ms", int, 2000, "heartbeat to the tracker this often", **POSITIVE),
    Key(
        "receiver",
        "stop_timeout_ms",
        int,
        30_000,
        "a stop ends within this, acknowledged or not (unacknowledged offsets stay uncommitted)",
        **POSITIVE,
    ),
    Key("receiver", "metrics_port", int, 0, "Prometheus metrics port (0: no metrics server)", **PORT),
    Key("receiver", "auth_token_file", str, "", "file holding the tracker's auth token"),
    Key("receiver", "tls_ca", str, "", "CA (PEM) that signed the tracker's certificate: TLS to the tracker"),
    Key("receiver", "tls_cert", str, "", "client certificate (PEM) shown to the tracker"),
    Key("receiver", "tls_key", str, "", "client certificate's private key (PEM)"),
    Key("receiver", "receiver_id", str, "", "receiver id prefix; ids are <prefix>-<n> (default: host-pid)"),
    Key(
        "block_store",
        "options",
        dict,
        {},
        "options of a non-file block store, passed to fsspec (endpoint_url, key, secret, ...)",
    ),
    # sources
    Key("kafka", "bootstrap_servers", str, "127.0.0.1:9092", "Kafka bootstrap servers", flags=("--bootstrap-servers",)),
    Key("kafka", "topic", str, "sluice", "topic(s) to read, comma-separated", flags=("--topic",)),
    Key("kafka", "group_id", str, "sluice", "consumer group", flags=("--group-id",)),
    Key(
        "kafka",
        "auto_offset_reset",
        str,
        "earliest",
        "where a group without commits starts",
        choices=("earliest", "latest"),
    ),
    Key(
        "kafka",
        "max_rate_per_partition",
        float,
        0.0,
        "direct mode: records/s cap per partition (0: none)",
        **NONE_AT_ZERO,
    ),
    Key("kafka", "min_rate_per_partition", float, 1.0, "direct mode: records/s floor per partition", **NONE_AT_ZERO),
    Key("kafka", "max_retries", int, 1, "direct mode: retries when asking for the latest offsets", **NONE_AT_ZERO),
    Key(
        "kafka",
        "client",
        dict,
        {},
        "extra aiokafka settings (TLS, SASL, fetch sizes, isolation_level), passed on unchanged",
    ),
    Key("socket", "host", str, "127.0.0.1", "socket source: host to connect to"),
    Key("socket", "port", int, 9999, "socket source: port to connect to", **PORT),
    Key("generator", "rate", float, 0.0, "generator source: records/s offered (0: as fast as allowed)", **NON_NEGATIVE),
    Key("generator", "batch_size", int, 100, "generator source: records per store_many", **POSITIVE),
    Key("generator", "words_per_record", int, 3, "generator source: words after the sequence number", **NON_NEGATIVE),
    Key("generator", "total", int, 0, "generator source: stop after this many records (0: never)", **NON_NEGATIVE),
    # rate control
    Key("backpressure", "enabled", bool, True, "adapt the receivers' rate to the processing rate"),
    Key(
        "backpressure",
        "initial_rate",
        float,
        0.0,
        "rate before the first estimate (0: none); receivers apply it from their start",
        flags=("--initial-rate",),
        **NONE_AT_ZERO,
    ),
    Key(
        "backpressure",
        "signal_interval_ms",
        int,
        200,
        "how often an estimator that opts in gets in-flight signals (0: never)",
        **NONE_AT_ZERO,
    ),
    Key(
        "backpressure",
        "resume_rate",
        bool,
        True,
        "the driver starts from the rate the tracker remembers (the last one published) when there is "
        "one; false: initial_rate wins",
        flags=("--resume-rate",),
    ),
    Key(
        "estimator",
        "name",
        str,
        "pid",
        "rate estimator (built-in or plugin)",
        flags=("--estimator",),
        plugins="sluice_register_estimators",
    ),
    Key("estimator", "pid.proportional", float, PID_DEFAULTS["proportional"], "PID proportional gain", **NON_NEGATIVE),
    Key("estimator", "pid.integral", float, PID_DEFAULTS["integral"], "PID integral gain", **NON_NEGATIVE),
    Key("estimator", "pid.derived", float, PID_DEFAULTS["derived"], "PID derivative gain", **NON_NEGATIVE),
    Key("estimator", "pid.min_rate", float, PID_DEFAULTS["min_rate"], "PID lowest rate", **POSITIVE),
    Key("estimator", "options", dict, {}, "options passed to a non-PID estimator"),
    # driver
    Key("driver", "tracker", str, "127.0.0.1:7100", "tracker address", **HOST_PORT),
    Key("driver", "app", str, "", "the batch function, as module:function"),
    Key("driver", "master", str, "local[*]", "Spark master URL"),
    Key("driver", "source", str, "receivers", "where batches come from", choices=("receivers", "direct-kafka")),
    Key("driver", "batch_interval_ms", int, 1000, "batch interval", **POSITIVE),
    Key("driver", "trigger", str, Trigger.FIXED.value, "when batches start", choices=tuple(t.value for t in Trigger)),
    Key("driver", "concurrent_jobs", int, 1, "batches processed at once (spark.streaming.concurrentJobs)", **POSITIVE),
    Key("driver", "max_batch_retries", int, 2, "retries of a failed batch", **NONE_AT_ZERO),
    Key("driver", "on_batch_failure", str, "stop", "after the retries", choices=("stop", "skip")),
    Key("driver", "checkpoint_dir", str, "./sluice-checkpoint", "driver checkpoint (direct mode offsets)"),
    Key(
        "driver",
        "stop_timeout_ms",
        int,
        30_000,
        "a graceful stop ends within this; batches still running then are cancelled and re-run after a restart",
        **POSITIVE,
    ),
    Key("driver", "metrics_port", int, 0, "Prometheus metrics port (0: no metrics server)", **PORT),
    Key("driver", "auth_token_file", str, "", "file holding the tracker's auth token"),
    Key("driver", "tls_ca", str, "", "CA (PEM) that signed the tracker's certificate: TLS to the tracker"),
    Key("driver", "tls_cert", str, "", "client certificate (PEM) shown to the tracker"),
    Key("driver", "tls_key", str, "", "client certificate's private key (PEM)"),
    Key(
        "driver",
        "block_store",
        str,
        "",
        "the block store blocks are read from and deleted in; a location outside it is refused (empty: "
        "the store each location names)",
    ),
)

SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(k.section for k in SCHEMA))
_BY_DOTTED = {k.dotted: k for k in SCHEMA}
_BY_ENV = {k.env: k for k in SCHEMA}
ENV_PREFIX = "SLUICE_"


@dataclass
class Config:
    """Resolved values by dotted key; ``config["driver.batch_interval_ms"]``."""

    values: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, dotted: str) -> Any:
        return self.values[dotted]

    def section(self, name: str) -> dict[str, Any]:
        """The keys of one section, without the section prefix (``pid.min_rate`` stays dotted)."""
        prefix = name + "."
        return {k[len(prefix) :]: v for k, v in self.values.items() if k.startswith(prefix)}


def key(dotted: str) -> Key:
    try:
        return _BY_DOTTED[dotted]
    except KeyError:
        raise ConfigError(f"unknown configuration key {dotted!r}") from None


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Flatten a TOML file into dotted keys, rejecting unknown sections and keys by name."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    flat: dict[str, Any] = {}

    def walk(prefix: str, table: Mapping[str, Any]) -> None:
        for name, value in table.items():
            dotted = f"{prefix}.{name}" if prefix else name
            if dotted in _BY_DOTTED:
                flat[dotted] = value
            elif isinstance(value, Mapping) and (not prefix or any(k.startswith(dotted + ".") for k in _BY_DOTTED)):
                if not prefix and name not in SECTIONS:
                    raise ConfigError(f"{path}: unknown section [{name}]; sections are {', '.join(SECTIONS)}")
                walk(dotted, value)
            else:
                raise ConfigError(f"{path}: unknown key {dotted}; see docs/reference/configuration.md")

    walk("", data)
    return flat


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse a ``SLUICE_*`` variable that names no key, or names a table.

    A variable under a section's prefix (``SLUICE_TRACKER_``), or close to a key's variable, is
    meant for Sluice, so a typo in it is an error naming the nearest key.  Other ``SLUICE_*`` names
    (a test harness's, an application's) are not Sluice's and are left alone.
    """
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX):
            continue
        known = _BY_ENV.get(name)
        if known is not None:
            if known.type is dict:
                raise ConfigError(
                    f"environment variable {name}: {known.dotted} is a table, which only the --config TOML "
                    f"file can set ([{known.dotted}])"
                )
            continue
        hint = did_you_mean(name, _BY_ENV, cutoff=0.85)  # the shared SLUICE_ prefix makes names alike
        under_section = any(name.startswith(f"{ENV_PREFIX}{section.upper()}_") for section in SECTIONS)
        if hint or under_section:
            hint = hint or "; see docs/reference/configuration.md"
            raise ConfigError(f"environment variable {name} names no configuration key{hint}")


def add_arguments(
    parser: argparse.ArgumentParser, sections: Iterable[str], home: str, *, config_file: bool = True
) -> None:
    """Add ``--config`` (unless ``config_file`` is False) and one flag per key of ``sections``
    (bare names for the ``home`` section)."""
    if config_file:
        parser.add_argument("--config", metavar="FILE", help="TOML configuration file")
    for k in SCHEMA:
        if k.section not in sections or k.type is dict:
            continue
        names = [k.flag(home), *k.flags]
        parser.add_argument(
            *dict.fromkeys(names),
            dest=k.dotted,
            default=None,
            metavar=k.type.__name__.upper(),
            help=f"{k.help} (default {k.default!r}; env {k.env})",
        )


def resolve(
    sections: Iterable[str],
    flags: Mapping[str, Any] | None = None,
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: str | None = None,
) -> Config:
    """Merge defaults, the TOML file, the environment and flags for ``sections``; check every value.

    ``home`` is the service's own section, so an error names the flag as the user typed it
    (``--listen``, not ``--tracker-listen``)."""
    wanted = set(sections)
    environ = os.environ if environ is None else environ
    check_environment(environ)
    from_file = read_toml(config_file) if config_file else {}
    values: dict[str, Any] = {}
    for k in SCHEMA:
        if k.section not in wanted:
            continue
        value, origin = k.default, "default"
        if k.dotted in from_file:
            value, origin = from_file[k.dotted], f"config file {config_file}"
        if k.env in environ and k.type is not dict:
            value, origin = environ[k.env], f"environment {k.env}"
        if flags and flags.get(k.dotted) is not None:
            value, origin = flags[k.dotted], f"flag {k.flag(home)}"
        values[k.dotted] = k.coerce(value, origin)
    return Config(values)


def parse_args(
    prog: str,
    description: str,
    sections: Sequence[str],
    home: str,
    argv: Sequence[str] | None = None,
    extend: Callable[[argparse.ArgumentParser], None] | None = None,
) -> tuple[Config, argparse.Namespace]:
    """Parse a service's command line into a checked :class:`Config`; exit 2 with one line on error."""
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=PRECEDENCE)
    add_arguments(parser, sections, home)
    if extend is not None:
        extend(parser)
    args = parser.parse_args(argv)
    try:
        config = resolve(sections, vars(args), args.config, home=home)
    except ConfigError as exc:
        parser.exit(2, f"{prog}: {exc}\n")
    return config, args


def read_token(path: str) -> str | None:
    """The auth token in ``path`` (stripped), or None when no file is configured."""
    if not path:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"auth token file {path} cannot be read: {exc.strerror}") from None
    if not token:
        raise ConfigError(f"auth token file {path} is empty")
    return token


def reference_table() -> str:
    """The table of docs/reference/configuration.md, generated from :data:`SCHEMA`."""
    rows = ["| key | default | environment | allowed | meaning |", "|---|---|---|---|---|"]
    for k in SCHEMA:
        default = "" if k.default in ("", {}) else f"`{k.default!r}`".replace("'", '"')
        rows.append(f"| `{k.dotted}` | {default} | `{k.env}` | {k.describe_allowed()} | {k.help} |")
    return "\n".join(rows)
