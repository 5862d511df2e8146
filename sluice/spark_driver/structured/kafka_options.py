"""The options of ``format("sluice-kafka")``, Spark's Kafka source names where Spark has one.

Checked before the query starts (pure: no broker); each refusal names the option, the value and
what is allowed.  Where positions come from, in Spark's order of precedence: ``*Timestamp`` (one
time for every partition), ``*OffsetsByTimestamp`` (JSON, per partition), ``*Offsets``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.errors import InvalidArgument
from sluice.kafka.offsets import TopicPartition
from sluice.kafka.topics import TopicSelection, assign, subscribe, subscribe_pattern
from sluice.spark_driver.structured.options import (
    SHARED_OPTIONS,
    Admission,
    OptionError,
    _admission,
    _allowed_file,
    _bool,
    _bootstrap,
    _choice,
    _float,
    _int,
    _json_map,
    _kafka_client,
    _lower,
    _optional_str,
    _refuse_unknown,
    bad_record_handling,
)
from sluice.storage.dead_letters import BadRecordHandling

#: The source's options besides kafka.<consumer setting> (the ending ones for spark.read only).
SOURCE_OPTIONS = (
    "kafka.bootstrap.servers",
    "kafka.group.id",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "includeHeaders",
    "failOnDataLoss",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxRatePerPartition",
    "minRatePerPartition",
    "maxBytesPerTrigger",
    "limitsCount",
    "topicWeights",
    "commitOffsetsOnCheckpoint",
    "rateFile",
    "kafkaClientOptions",
    *SHARED_OPTIONS,
)
#: Consumer settings a query may not give as kafka.*, with Spark's reasons where its source refuses
#: them too (KafkaSourceProvider).
_OWNED = {
    "bootstrap_servers": "give kafka.bootstrap.servers",
    "group_id": "give kafka.group.id",
    "auto_offset_reset": "give startingOffsets to say where to start",
    "enable_auto_commit": "offsets are committed by commitOffsetsOnCheckpoint, never by a consumer",
    "key_deserializer": "keys are read as bytes (the key column is binary)",
    "value_deserializer": "values are read as bytes (the value column is binary)",
}

#: Spark's special offsets in a ``startingOffsets`` / ``endingOffsets`` JSON.
EARLIEST, LATEST = -2, -1

Positions = str | dict[TopicPartition, int]


@dataclass(frozen=True)
class Position:
    """Where a read starts or ends: ``offsets`` (``earliest``, ``latest`` or per partition, -2/-1
    special), or by time: ``timestamp`` for every partition, or ``timestamps`` per partition."""

    offsets: Positions = "latest"
    timestamp: int | None = None
    timestamps: dict[TopicPartition, int] | None = None


@dataclass(frozen=True)
class KafkaOptions:
    """The ``sluice-kafka`` source's settings (see :func:`kafka_options`)."""

    bootstrap_servers: str
    selection: TopicSelection
    starting: Position
    ending: Position
    timestamp_strategy: str
    include_headers: bool
    fail_on_data_loss: bool
    max_rate_per_partition: float
    min_rate_per_partition: float
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    max_records_per_partition: int | None
    max_bytes_per_trigger: int | None
    count_records: bool
    topic_weights: dict[str, float] | None
    group_id: str | None
    commit_offsets: bool
    rate_file: str | None
    client_options: dict[str, Any]
    limits: Admission
    bad_records: BadRecordHandling = BadRecordHandling()


_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(options: dict[str, str], name: str, default: str) -> int:
    """Spark's time strings (``JavaUtils.timeStringAsMs``): ``15m``, ``30s``, ``500ms``, bare ms."""
    raw = options.get(name.lower(), default).strip().lower()
    match = re.fullmatch(r"(\d+)\s*([a-z]*)", raw)
    if match is None or match.group(2) not in ("", *_UNITS_MS):
        raise OptionError(
            f"option {name} = {raw!r} is not allowed: expected a duration such as 500ms, 30s, 15m, 1h or 1d"
        )
    return int(int(match.group(1)) * _UNITS_MS.get(match.group(2), 1))


_UNITS_BYTES = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}
_UNITS_BYTES |= {"t": 1 << 40, "tb": 1 << 40}


def byte_size(options: dict[str, str], name: str) -> int | None:
    """Spark's byte strings (``JavaUtils.byteStringAsBytes``, powers of 1024): ``512k``, ``10m``, bare bytes."""
    raw = options.get(name.lower())
    if raw is None or not raw.strip():
        return None
    match = re.fullmatch(r"(\d+)\s*([a-z]*)", raw.strip().lower())
    if match is None or match.group(2) not in _UNITS_BYTES or int(match.group(1)) == 0:
        raise OptionError(
            f"option {name} = {raw!r} is not allowed: expected a size above 0 such as 1048576, 512k, 10m or 1g"
        )
    return int(match.group(1)) * _UNITS_BYTES[match.group(2)]


def _offsets(raw: str, name: str, special: tuple[str, ...]) -> Positions:
    text = raw.strip()
    if text.lower() in special:
        return text.lower()
    allowed = f'{" or ".join(special)}, or JSON such as {{"topic": {{"0": 23, "1": -2}}}} (-2: earliest, -1: latest)'
    parsed = _partition_map(text, name, allowed, EARLIEST)
    if name == "endingOffsets" and EARLIEST in parsed.values():
        raise OptionError(f"option endingOffsets = {raw!r} is not allowed: -2 (earliest) cannot end a read")
    return parsed


def _partition_map(text: str, name: str, allowed: str, minimum: int) -> dict[TopicPartition, int]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise OptionError(f"option {name} = {text!r} is not allowed: expected {allowed}")
    found: dict[TopicPartition, int] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"option {name}: topic {topic!r} must map partitions to numbers; {allowed}")
        for partition, number in partitions.items():
            digits = str(partition).isascii() and str(partition).isdigit()
            if not digits or not isinstance(number, int) or isinstance(number, bool):
                number = minimum - 1
            if number < minimum:
                raise OptionError(
                    f"option {name}: {topic}/{partition} = {partitions[partition]!r} is not allowed: "
                    f"expected a partition number and a number of {minimum} or more"
                )
            found[(topic, int(partition))] = number
    return found


def _position(o: dict[str, str], prefix: str, default: str, special: tuple[str, ...]) -> Position:
    """``{prefix}Timestamp`` over ``{prefix}OffsetsByTimestamp`` over ``{prefix}Offsets`` (Spark's order)."""
    stamp = _int(o, f"{prefix}Timestamp", None, 0)
    by_time = o.get(f"{prefix}offsetsbytimestamp")
    stamps = None
    if stamp is None and by_time is not None:
        stamps = _partition_map(
            by_time, f"{prefix}OffsetsByTimestamp", 'JSON such as {"topic": {"0": 1700000000000}} (epoch ms)', 0
        )
    offsets = _offsets(o.get(f"{prefix}offsets", default), f"{prefix}Offsets", special)
    return Position(offsets, stamp, stamps)


def _selection(o: dict[str, str]) -> TopicSelection:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in o]
    if len(given) != 1:
        raise OptionError(
            f"options {', '.join(given)} are given together: give exactly one of subscribe, subscribePattern or assign"
            if given
            else "option subscribe is missing: give one of subscribe (topics, comma-separated), "
            "subscribePattern (a regular expression) or assign (JSON partitions)"
        )
    parse = {"subscribe": subscribe, "subscribePattern": subscribe_pattern, "assign": assign}[given[0]]
    try:
        return parse(o[given[0].lower()])
    except InvalidArgument as exc:
        raise OptionError(f"option {exc}") from None


def _check_named(selection: TopicSelection, position: Position, name: str) -> None:
    """JSON positions must cover the topics subscribe names (Spark refuses the mismatch too)."""
    for what, found in ((f"{name}Offsets", position.offsets), (f"{name}OffsetsByTimestamp", position.timestamps)):
        if not isinstance(found, dict) or not selection.topics:
            continue
        if {t for t, _ in found} != set(selection.topics):
            raise OptionError(
                f"option {what} names topics {sorted({t for t, _ in found})}, but subscribe names "
                f"{sorted(selection.topics)}: give offsets for every subscribed topic"
            )


def kafka_options(options: Mapping[str, Any], *, batch: bool = False) -> KafkaOptions:
    """The ``sluice-kafka`` options (``batch``: for ``spark.read``, which also takes ``ending*``).

    ``kafka.bootstrap.servers`` (required); one of ``subscribe``, ``subscribePattern``, ``assign``;
    ``startingOffsets`` (streaming ``latest``, batch ``earliest``), ``startingTimestamp``,
    ``startingOffsetsByTimestamp``, ``startingOffsetsByTimestampStrategy`` (``error``/``latest``);
    batch only: ``endingOffsets`` (``latest``), ``endingTimestamp``, ``endingOffsetsByTimestamp``;
    ``includeHeaders``, ``failOnDataLoss`` (true), ``maxOffsetsPerTrigger``,
    ``minOffsetsPerTrigger``, ``maxTriggerDelay`` (15m), ``minPartitions``,
    ``maxRecordsPerPartition``, ``maxRatePerPartition``, ``minRatePerPartition`` (1),
    ``maxBytesPerTrigger`` (bytes, or ``512k``, ``10m``, ``1g``), ``limitsCount`` (``offsets``, as
    Spark, or ``records``: bounds count records on logs with gaps), ``topicWeights`` (JSON
    ``{"topic": weight}``: a batch shared among topics by weight),
    ``kafka.group.id`` with ``commitOffsetsOnCheckpoint``, ``admission``, ``rateFile``,
    ``triggerIntervalMs`` (1000), ``kafkaClientOptions`` (JSON aiokafka settings),
    ``kafka.<consumer setting>`` (aiokafka's name with dots, as Spark hands ``kafka.*`` to its
    consumer: ``kafka.security.protocol``, ``kafka.isolation.level``) and
    ``badRecords`` (``fail``, ``skip``, ``dead-letter`` with ``deadLetter``:
    :func:`~sluice.spark_driver.structured.options.bad_record_handling`).
    """
    o = _lower(options)
    bootstrap = _bootstrap(o)
    selection = _selection(o)
    if not batch:
        for ending in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if ending.lower() in o:
                raise OptionError(
                    f"option {ending} is for batch reads (spark.read) only: a stream has no end; "
                    "use Trigger.AvailableNow to stop at what is there"
                )
    starting = _position(o, "starting", "earliest" if batch else "latest", ("earliest", "latest"))
    finish = _position(o, "ending", "latest", ("latest",))
    _check_named(selection, starting, "starting")
    _check_named(selection, finish, "ending")
    limits = _admission(o)
    least = _int(o, "minOffsetsPerTrigger", None, 1)
    if least is not None and limits.max_offsets_per_trigger is not None and least > limits.max_offsets_per_trigger:
        raise OptionError(
            f"option minOffsetsPerTrigger = {least} is not allowed: it must not exceed maxOffsetsPerTrigger "
            f"({limits.max_offsets_per_trigger})"
        )
    try:
        weights = selection.weights(_json_map(o, "topicWeights"), "option topicWeights") or None
    except InvalidArgument as exc:
        raise OptionError(str(exc)) from None
    group = _optional_str(o, "kafka.group.id")
    commit = _bool(o, "commitOffsetsOnCheckpoint", False)
    if commit and group is None:
        raise OptionError("option commitOffsetsOnCheckpoint needs kafka.group.id: the group to commit offsets to")
    # aiokafka loads as a query starts, not with this module, which the docs' build imports
    from aiokafka import AIOKafkaConsumer

    client = _kafka_client(o, AIOKafkaConsumer, _OWNED, SOURCE_OPTIONS, "consumer")
    _refuse_unknown(options, SOURCE_OPTIONS, "sluice-kafka source", kafka=True)
    return KafkaOptions(
        bootstrap_servers=bootstrap,
        selection=selection,
        starting=starting,
        ending=finish,
        timestamp_strategy=_choice(o, "startingOffsetsByTimestampStrategy", "error", ("error", "latest")),
        include_headers=_bool(o, "includeHeaders", False),
        fail_on_data_loss=_bool(o, "failOnDataLoss", True),
        max_rate_per_partition=_float(o, "maxRatePerPartition", 0.0),
        min_rate_per_partition=_float(o, "minRatePerPartition", 1.0),
        min_offsets_per_trigger=least,
        max_trigger_delay_ms=duration_ms(o, "maxTriggerDelay", "15m"),
        min_partitions=_int(o, "minPartitions", None, 1),
        max_records_per_partition=_int(o, "maxRecordsPerPartition", None, 1),
        max_bytes_per_trigger=byte_size(o, "maxBytesPerTrigger"),
        count_records=_choice(o, "limitsCount", "offsets", ("offsets", "records")) == "records",
        topic_weights=weights,
        group_id=group,
        commit_offsets=commit,
        rate_file=_allowed_file(o, "rateFile"),
        client_options=client,
        limits=limits,
        bad_records=bad_record_handling(o),
    )
