"""The options of the ``sluice`` and ``sluice-kafka`` sources, checked before a query starts.

Spark hands a Python data source its options as strings (``.option("streams", "0,1")``), keys
case-insensitive.  Each parser here turns them into one frozen settings object, or raises
:class:`OptionError` naming the option, the value and what is allowed: a typo must stop the query
at ``start()``, not show up as an odd batch an hour later.  Pure: no sockets, no Spark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.errors import SluiceError
from sluice.tracker.leader_finder import parse_addresses


class OptionError(SluiceError, ValueError):
    """An option of a Structured Streaming source is missing or has a value that is not allowed."""


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _int(options: dict[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise OptionError(f"option {name} = {raw!r} is not allowed: expected an integer of {minimum} or more")
    return value


def _float(options: dict[str, str], name: str, default: float) -> float:
    raw = options.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise OptionError(f"option {name} = {raw!r} is not allowed: expected a number of 0 or more")
    return value


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise OptionError(f"option {name} = {raw!r} is not allowed: expected true or false")
    return raw.strip().lower() == "true"


def _choice(options: dict[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = options.get(name.lower(), default).strip().lower()
    if raw not in allowed:
        raise OptionError(f"option {name} = {raw!r} is not allowed: expected one of {', '.join(allowed)}")
    return raw


def _json_map(options: dict[str, str], name: str) -> dict[str, Any]:
    raw = options.get(name.lower())
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise OptionError(f"option {name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise OptionError(f"option {name} must be a JSON object, got {type(value).__name__}")
    return value


def _optional_str(options: dict[str, str], name: str) -> str | None:
    raw = options.get(name.lower(), "").strip()
    return raw or None


@dataclass(frozen=True)
class Admission:
    """How each micro-batch is bounded (the options both sources share).

    :param max_offsets_per_trigger: Spark's ``maxOffsetsPerTrigger``: a fixed bound on the records
        of one batch; ``None``: none.
    :param admission: bound each batch by the rate the admission listener published.
    :param trigger_interval_ms: the query's processing-time trigger, which turns a rate into a batch.
    """

    max_offsets_per_trigger: int | None
    admission: bool
    trigger_interval_ms: int


def _admission(options: dict[str, str]) -> Admission:
    interval = _int(options, "triggerIntervalMs", 1000, 1)
    assert interval is not None
    return Admission(_int(options, "maxOffsetsPerTrigger", None, 1), _bool(options, "admission", True), interval)


def admission_settings(options: Mapping[str, Any]) -> Admission:
    """The batch bounds of either source's options (the admission listener reads the same map)."""
    return _admission(_lower(options))


@dataclass(frozen=True)
class SluiceOptions:
    """The ``sluice`` source's settings (see :func:`sluice_options`)."""

    tracker: str
    streams: tuple[int, ...]
    records: str
    block_store: str | None
    block_store_options: dict[str, Any]
    auth_token_file: str | None
    tls_ca_file: str | None
    tls_cert_file: str | None
    tls_key_file: str | None
    tls: bool
    request_timeout_s: float
    limits: Admission


def _streams(raw: str) -> tuple[int, ...]:
    parts = [p.strip() for p in raw.split(",")]
    if not all(p.isdigit() for p in parts):
        raise OptionError(
            f"option streams = {raw!r} is not allowed: expected stream ids (integers of 0 or more), comma-separated"
        )
    streams = tuple(dict.fromkeys(int(p) for p in parts))
    return streams


def sluice_options(options: Mapping[str, Any]) -> SluiceOptions:
    """The ``sluice`` source's options:

    ``tracker`` (HOST:PORT, required), ``streams`` ("0"), ``records`` (``kafka``: the Kafka source's
    schema, or ``value``), ``blockStore`` (URL; default the one each block's location names),
    ``blockStoreOptions`` (JSON, a ``[block_store.options]`` table), ``authTokenFile``, ``tls``
    (true: TLS with the system's CAs), ``tlsCaFile`` (TLS trusting this CA), ``tlsCertFile`` and
    ``tlsKeyFile`` (a client certificate, for a tracker that requires one), ``requestTimeoutMs``,
    and the batch bounds ``maxOffsetsPerTrigger``, ``admission`` (true), ``triggerIntervalMs`` (1000).
    """
    o = _lower(options)
    tracker = o.get("tracker", "").strip()
    if not tracker:
        raise OptionError("option tracker is missing: give the tracker's HOST:PORT")
    try:
        parse_addresses(tracker)
    except ValueError as exc:
        raise OptionError(f"option tracker = {tracker!r} is not allowed: {exc}") from None
    timeout = _int(o, "requestTimeoutMs", 10_000, 1)
    assert timeout is not None
    ca = _optional_str(o, "tlsCaFile")
    cert, key = _optional_str(o, "tlsCertFile"), _optional_str(o, "tlsKeyFile")
    if bool(cert) != bool(key):
        raise OptionError(
            "options tlsCertFile and tlsKeyFile must be given together (a client certificate and its key)"
        )
    return SluiceOptions(
        tracker=tracker,
        streams=_streams(o.get("streams", "0")),
        records=_choice(o, "records", "kafka", ("kafka", "value")),
        block_store=_optional_str(o, "blockStore"),
        block_store_options=_json_map(o, "blockStoreOptions"),
        auth_token_file=_optional_str(o, "authTokenFile"),
        tls_ca_file=ca,
        tls_cert_file=cert,
        tls_key_file=key,
        tls=_bool(o, "tls", False) or ca is not None or cert is not None,
        request_timeout_s=timeout / 1000,
        limits=_admission(o),
    )


@dataclass(frozen=True)
class KafkaOptions:
    """The ``sluice-kafka`` source's settings (see :func:`kafka_options`)."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    starting: str | dict[tuple[str, int], int]
    fail_on_data_loss: bool
    max_rate_per_partition: float
    min_rate_per_partition: float
    rate_file: str | None
    client_options: dict[str, Any]
    limits: Admission


#: Spark's special offsets in a ``startingOffsets`` JSON.
EARLIEST, LATEST = -2, -1


def _starting(raw: str) -> str | dict[tuple[str, int], int]:
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    allowed = 'earliest, latest, or JSON such as {"topic": {"0": 23, "1": -2}} (-2: earliest, -1: latest)'
    if not isinstance(value, dict):
        raise OptionError(f"option startingOffsets = {raw!r} is not allowed: expected {allowed}")
    found: dict[tuple[str, int], int] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"option startingOffsets: topic {topic!r} must map partitions to offsets; {allowed}")
        for partition, offset in partitions.items():
            if (
                not str(partition).isdigit()
                or not isinstance(offset, int)
                or isinstance(offset, bool)
                or offset < EARLIEST
            ):
                raise OptionError(
                    f"option startingOffsets: {topic}/{partition} = {offset!r} is not allowed: "
                    "expected a partition number and an offset of 0 or more, -2 or -1"
                )
            found[(topic, int(partition))] = offset
    return found


def kafka_options(options: Mapping[str, Any]) -> KafkaOptions:
    """The ``sluice-kafka`` source's options, Spark's Kafka source names where Spark has one:

    ``kafka.bootstrap.servers`` (required), ``subscribe`` (topics, comma-separated; required),
    ``startingOffsets`` (``latest``, ``earliest`` or JSON), ``failOnDataLoss`` (true),
    ``maxOffsetsPerTrigger``, ``maxRatePerPartition`` (records/s, 0: none), ``minRatePerPartition``
    (records/s, 1), ``admission`` (true), ``rateFile`` (where the admission listener writes the
    rate), ``triggerIntervalMs`` (1000) and ``kafkaClientOptions`` (JSON: aiokafka settings such as
    ``security_protocol``, ``ssl_cafile``, ``sasl_mechanism``).
    """
    o = _lower(options)
    for unsupported in ("subscribepattern", "assign"):
        if unsupported in o:
            raise OptionError(f"option {unsupported} is not supported by sluice-kafka: use subscribe")
    bootstrap = o.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionError("option kafka.bootstrap.servers is missing: give the brokers' HOST:PORT list")
    topics = tuple(dict.fromkeys(t.strip() for t in o.get("subscribe", "").split(",") if t.strip()))
    if not topics:
        raise OptionError("option subscribe is missing: give one or more topics, comma-separated")
    starting = _starting(o.get("startingoffsets", "latest"))
    if isinstance(starting, dict) and {t for t, _ in starting} != set(topics):
        raise OptionError(
            f"option startingOffsets names topics {sorted({t for t, _ in starting})}, "
            f"but subscribe names {sorted(topics)}: give offsets for every subscribed topic"
        )
    return KafkaOptions(
        bootstrap_servers=bootstrap,
        topics=topics,
        starting=starting,
        fail_on_data_loss=_bool(o, "failOnDataLoss", True),
        max_rate_per_partition=_float(o, "maxRatePerPartition", 0.0),
        min_rate_per_partition=_float(o, "minRatePerPartition", 1.0),
        rate_file=_optional_str(o, "rateFile"),
        client_options=_json_map(o, "kafkaClientOptions"),
        limits=_admission(o),
    )
