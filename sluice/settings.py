"""Typed settings per section, built from the configuration schema (:data:`sluice.config.SCHEMA`).

The schema is the one place a default is written.  Each field of these frozen dataclasses names the
schema key it mirrors and takes that key's default, so a constructor called directly
(``StreamingDriver(spark, tracker=..., batch_interval_ms=500)``) and a service built from a resolved
:class:`~sluice.config.Config` (``DriverSettings.from_config(config)``) start from the same values.
A test scans the constructors that take settings, and the ``DEFAULTS``-like tables, for a literal
that repeats a schema default.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar

from sluice.config import Config, key
from sluice.errors import InvalidArgumentType
from sluice.redaction import redacted

__all__ = [
    "DriverSettings",
    "KafkaSettings",
    "ReceiverSettings",
    "TrackerSettings",
    "none_at_zero",
    "with_overrides",
]


def none_at_zero(value: float | None) -> Any:
    """The schema's ``0 means none`` (rates, byte limits): ``None`` for 0, a negative or an infinity."""
    return value if value is not None and value > 0 and not math.isinf(value) else None


def _setting(dotted: str, convert: Callable[[Any], Any] | None = None) -> Any:
    """A field mirroring schema key ``dotted``: its default is the key's (through ``convert``)."""
    default = key(dotted).default
    metadata = {"key": dotted, "convert": convert}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=metadata)
    return dataclasses.field(default=convert(default) if convert else default, metadata=metadata)


class _Section:
    """``from_config``: every field from the key it mirrors, converted as its default is."""

    @classmethod
    def from_config(cls, config: Config) -> Self:
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # every subclass is a dataclass
            convert = f.metadata["convert"]
            value = config[f.metadata["key"]]
            values[f.name] = convert(value) if convert else value
        return cls(**values)


S = TypeVar("S", bound=_Section)


def with_overrides(settings: S, overrides: Mapping[str, Any], owner: str) -> S:
    """``settings`` with the keyword arguments a caller gave ``owner`` instead of a settings object;
    an unknown name is a ``TypeError`` that lists the allowed ones."""
    names = {f.name for f in dataclasses.fields(settings)}  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise InvalidArgumentType(
            f"{owner} got unknown setting(s) {', '.join(unknown)}; allowed: {', '.join(sorted(names))}"
        )
    return dataclasses.replace(settings, **overrides)  # type: ignore[type-var]


@dataclasses.dataclass(frozen=True)
class DriverSettings(_Section):
    """What :class:`~sluice.spark_driver.driver.StreamingDriver` runs by (``driver``,
    ``backpressure``, ``estimator.name`` and the receivers' block interval).  ``initial_rate`` 0
    means none, as in the schema."""

    master: str = _setting("driver.master")
    batch_interval_ms: int = _setting("driver.batch_interval_ms")
    trigger: str = _setting("driver.trigger")
    concurrent_jobs: int = _setting("driver.concurrent_jobs")
    max_batch_retries: int = _setting("driver.max_batch_retries")
    on_batch_failure: str = _setting("driver.on_batch_failure")
    bad_records: str = _setting("driver.bad_records")
    dead_letter: str = _setting("driver.dead_letter")
    max_batch_partitions: int = _setting("driver.max_batch_partitions")
    min_batch_partitions: int = _setting("driver.min_batch_partitions")
    estimator: str = _setting("estimator.name")
    backpressure: bool = _setting("backpressure.enabled")
    initial_rate: float = _setting("backpressure.initial_rate")
    resume_rate: bool = _setting("backpressure.resume_rate")
    slow_start: bool = _setting("backpressure.slow_start")
    signal_interval_ms: float = _setting("backpressure.signal_interval_ms")
    target: str = _setting("backpressure.target")
    target_latency_ms: int = _setting("backpressure.target_latency_ms")
    block_interval_ms: float = _setting("receiver.block_interval_ms")

    @classmethod
    def from_config(cls, config: Config) -> Self:
        """As the schema says; the receivers' block interval (the latency target's model) from
        ``receiver.block_interval_ms`` when the configuration holds that section, else its default."""
        return super().from_config(Config({"receiver.block_interval_ms": cls.block_interval_ms, **config.values}))


@dataclasses.dataclass(frozen=True)
class ReceiverSettings(_Section):
    """What a :class:`~sluice.receiver.supervisor.ReceiverSupervisor` runs by; the rates and the
    byte limit are ``None`` where the schema says 0 (none)."""

    stream_id: int = _setting("receiver.stream_id")
    max_rate: float | None = _setting("receiver.max_rate", none_at_zero)
    initial_rate: float | None = _setting("backpressure.initial_rate", none_at_zero)
    block_interval_ms: float = _setting("receiver.block_interval_ms")
    block_lead_ms: float = _setting("receiver.block_lead_ms")
    block_queue_size: int = _setting("receiver.block_queue_size")
    max_block_records: int = _setting("receiver.max_block_records")
    max_block_bytes: int | None = _setting("receiver.max_block_bytes", none_at_zero)
    restart_delay_ms: float = _setting("receiver.restart_delay_ms")
    heartbeat_interval_ms: float = _setting("receiver.heartbeat_interval_ms")
    orphan_grace_ms: float | None = _setting("receiver.orphan_grace_ms", none_at_zero)

    @classmethod
    def from_config(cls, config: Config) -> Self:
        """As the schema says, and ``backpressure.initial_rate`` only while backpressure is on: each
        receiver applies it (capped by ``receiver.max_rate``) from its start until the tracker
        pushes a share, as Spark's receivers do, so a receiver that starts before any driver is
        bounded from its first record."""
        settings = super().from_config(config)
        return settings if config["backpressure.enabled"] else dataclasses.replace(settings, initial_rate=None)


@dataclasses.dataclass(frozen=True)
class KafkaSettings(_Section):
    """Direct Kafka mode's source (``kafka`` and ``driver.checkpoint_dir``).  The per-partition
    rates stay numbers here (0: none); the source also takes per-partition mappings."""

    bootstrap_servers: str = _setting("kafka.bootstrap_servers")
    topics: str = _setting("kafka.topic")
    topic_pattern: str = _setting("kafka.topic_pattern")
    group_id: str = _setting("kafka.group_id")
    auto_offset_reset: str = _setting("kafka.auto_offset_reset")
    checkpoint_dir: str = _setting("driver.checkpoint_dir")
    max_rate_per_partition: float = _setting("kafka.max_rate_per_partition")
    min_rate_per_partition: float = _setting("kafka.min_rate_per_partition")
    topic_weights: dict[str, float] = _setting("kafka.topic_weights")
    limits_count: str = _setting("kafka.limits_count")
    max_bytes_per_batch: int = _setting("kafka.max_bytes_per_batch")
    max_retries: int = _setting("kafka.max_retries")
    client_options: dict[str, Any] = _setting("kafka.client")
    fail_on_data_loss: bool = _setting("kafka.fail_on_data_loss")

    def __repr__(self) -> str:
        """The fields, ``client_options``' credentials hidden: settings end up in logs and tracebacks."""
        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        shown["client_options"] = redacted(self.client_options)
        return f"KafkaSettings({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


@dataclasses.dataclass(frozen=True)
class TrackerSettings(_Section):
    """What the tracker service keeps batches and receivers by, and its log's segments (``tracker``)."""

    remember_ms: int = _setting("tracker.remember_ms")
    liveness_timeout_ms: int = _setting("tracker.liveness_timeout_ms")
    rate_split: str = _setting("tracker.rate_split")
    max_batch_ahead_ms: int = _setting("tracker.max_batch_ahead_ms")
    wal_segment_bytes: int = _setting("tracker.wal_segment_bytes")
    wal_segment_ms: int = _setting("tracker.wal_segment_ms")
    wal_piece_bytes: int = _setting("tracker.wal_piece_bytes")
    lease_ms: int = _setting("tracker.lease_ms")
    standby_poll_ms: int = _setting("tracker.standby_poll_ms")
    log_outage_ms: int = _setting("tracker.log_outage_ms")
    max_connections: int = _setting("tracker.max_connections")
    max_pending_hellos: int = _setting("tracker.max_pending_hellos")
    frame_timeout_ms: int = _setting("tracker.frame_timeout_ms")
    max_receivers: int = _setting("tracker.max_receivers")
    max_streams: int = _setting("tracker.max_streams")
    max_ranges_per_block: int = _setting("tracker.max_ranges_per_block")
    max_partitions_per_stream: int = _setting("tracker.max_partitions_per_stream")
    max_queued_blocks: int = _setting("tracker.max_queued_blocks")
    max_queued_records: int = _setting("tracker.max_queued_records")
    error_reports_per_minute: int = _setting("tracker.error_reports_per_minute")
