"""The options of the ``sluice`` source and the parsers both sources share, checked before a query
starts (``sluice-kafka``'s own are in :mod:`.kafka_options`).

Spark hands a Python data source its options as strings (``.option("streams", "0,1")``), keys
case-insensitive.  Each parser here turns them into one frozen settings object, or raises
:class:`OptionError` naming the option, the value and what is allowed: a typo must stop the query
at ``start()``, not show up as an odd batch an hour later.  Pure: no sockets, no Spark.

Options are written by whoever writes the query, so options naming files or hosts follow what the
server allows, from its environment: a file option (``authTokenFile``, ``tlsCaFile``,
``tlsCertFile``, ``tlsKeyFile``, ``rateFile``) must lie, symbolic links resolved, in a directory of
``SLUICE_STRUCTURED_FILE_DIRS`` (directories separated by ``os.pathsep``; none when unset), and
the token goes only to a loopback tracker or one whose host ``SLUICE_STRUCTURED_TRACKER_HOSTS``
lists (comma-separated).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.errors import SluiceError
from sluice.kafka.bad_records import BadRecordPolicy
from sluice.kafka.client_settings import client_keywords
from sluice.storage.block_store import store_root
from sluice.storage.dead_letters import BadRecordHandling
from sluice.tracker.client.connection import parse_address
from sluice.tracker.client.leader_finder import parse_addresses
from sluice.tracker.wire.tls import is_loopback

FILE_DIRS_ENV = "SLUICE_STRUCTURED_FILE_DIRS"
TRACKER_HOSTS_ENV = "SLUICE_STRUCTURED_TRACKER_HOSTS"


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


def _setting_value(raw: str) -> Any:
    """A ``kafka.*`` string as aiokafka takes it: ``true``/``false`` a bool, digits an int."""
    text = raw.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return int(text) if text.lstrip("-").isdigit() else text


def _kafka_client(
    options: dict[str, str], client_class: type, owned: Mapping[str, str], known: tuple[str, ...], what: str
) -> dict[str, Any]:
    """``kafkaClientOptions`` with the ``kafka.<setting>`` options over it, as ``client_class``'s
    keyword arguments, as Spark's Kafka source and sink hand ``kafka.*`` to their clients
    (``kafka.security.protocol`` is aiokafka's ``security_protocol``); the ``kafka.*`` names in
    ``known`` are the caller's own options.  ``owned`` maps the settings a query may not give this
    way to the reason; a name the client does not take is refused with the ones it does, never
    dropped: a dropped ``kafka.isolation.level`` or ``kafka.security.protocol`` would read aborted
    records or talk plaintext without a word."""
    allowed = client_keywords(client_class) - {"loop", *owned}
    own = {k.lower() for k in known}
    settings = _json_map(options, "kafkaClientOptions")
    for name, raw in options.items():
        if not name.startswith("kafka.") or name in own:
            continue
        setting = name.removeprefix("kafka.").replace(".", "_")
        if setting in owned:
            raise OptionError(f"option {name} is not allowed: {owned[setting]}")
        if setting not in allowed:
            raise OptionError(
                f"option {name} is not a {what} setting: expected kafka. and one of "
                f"{', '.join(sorted(s.replace('_', '.') for s in allowed))}"
            )
        settings[setting] = _setting_value(raw)
    return settings


def _refuse_unknown(options: Mapping[str, Any], known: tuple[str, ...], what: str, *, kafka: bool) -> None:
    """Refuse an option ``what`` does not read, naming the ones it does (``kafka``: it takes
    ``kafka.*`` too, which :func:`_kafka_settings` checks): Spark ignores an option nobody reads,
    so a misspelt ``maxOfsetsPerTrigger`` would run the query unbounded."""
    names = {k.lower() for k in known}
    unknown = sorted(
        str(n) for n in options if str(n).lower() not in names and not (kafka and str(n).lower().startswith("kafka."))
    )
    if unknown:
        extra = ", or kafka.<a setting of its Kafka client>" if kafka else ""
        raise OptionError(f"option {unknown[0]} is not a {what} option: expected one of {', '.join(known)}{extra}")


def _optional_str(options: dict[str, str], name: str) -> str | None:
    raw = options.get(name.lower(), "").strip()
    return raw or None


def _bootstrap(options: dict[str, str]) -> str:
    """``kafka.bootstrap.servers``, which the Kafka source and sink both require."""
    bootstrap = options.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionError("option kafka.bootstrap.servers is missing: give the brokers' HOST:PORT list")
    return bootstrap


def _allowed_file(options: dict[str, str], name: str) -> str | None:
    """A file option, refused unless it lies in a directory the server allows."""
    path = _optional_str(options, name)
    if path is None:
        return None
    dirs = [Path(d).resolve() for d in os.environ.get(FILE_DIRS_ENV, "").split(os.pathsep) if d.strip()]
    if not any(Path(path).resolve().is_relative_to(d) for d in dirs):
        raise OptionError(
            f"option {name} = {path!r} is not allowed: files must lie in a directory of {FILE_DIRS_ENV} "
            f"({os.pathsep.join(map(str, dirs)) if dirs else 'unset: no file option is allowed'})"
        )
    return path


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


#: The options both sources read through :func:`_admission` and :func:`bad_record_handling`.
SHARED_OPTIONS = ("maxOffsetsPerTrigger", "admission", "triggerIntervalMs", "badRecords", "deadLetter")
#: The ``sluice`` source's own options.
SLUICE_OPTIONS = (
    "tracker",
    "streams",
    "records",
    "includeHeaders",
    "blockStore",
    "blockStoreOptions",
    "authTokenFile",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
    "tls",
    "requestTimeoutMs",
    *SHARED_OPTIONS,
)


def _admission(options: dict[str, str]) -> Admission:
    interval = _int(options, "triggerIntervalMs", 1000, 1)
    assert interval is not None
    return Admission(_int(options, "maxOffsetsPerTrigger", None, 1), _bool(options, "admission", True), interval)


def admission_settings(options: Mapping[str, Any]) -> Admission:
    """The batch bounds of either source's options (the admission listener reads the same map)."""
    return _admission(_lower(options))


def bad_record_handling(o: dict[str, str]) -> BadRecordHandling:
    """``badRecords`` (``driver.bad_records``'s values) and ``deadLetter``, the directory
    ``dead-letter`` writes to: a local one, inside a directory the server allows (the file options'
    rule), since a query's options must not pick what the server's processes write."""
    policy = BadRecordPolicy(_choice(o, "badRecords", "fail", tuple(p.value for p in BadRecordPolicy)))
    given = _optional_str(o, "deadLetter")
    if policy is not BadRecordPolicy.DEAD_LETTER:
        if given is not None:
            raise OptionError(f"option deadLetter is given but badRecords = {policy.value}: it is for dead-letter only")
        return BadRecordHandling(policy)
    if given is None:
        raise OptionError("option badRecords = dead-letter needs deadLetter: the directory records are kept in")
    path = given.removeprefix("file://")
    if "://" in path:
        raise OptionError(
            f"option deadLetter = {given!r} is not allowed: expected a local directory (a path or file:// URL)"
        )
    allowed = _allowed_file({"deadletter": path}, "deadLetter")
    assert allowed is not None
    return BadRecordHandling(policy, store_root(Path(allowed).resolve().as_uri()))


@dataclass(frozen=True)
class SluiceOptions:
    """The ``sluice`` source's settings (see :func:`sluice_options`)."""

    tracker: str
    streams: tuple[int, ...]
    records: str
    include_headers: bool
    block_store: str | None
    block_store_options: dict[str, Any]
    auth_token_file: str | None
    tls_ca_file: str | None
    tls_cert_file: str | None
    tls_key_file: str | None
    tls: bool
    request_timeout_s: float
    limits: Admission
    bad_records: BadRecordHandling = BadRecordHandling()


def _streams(raw: str) -> tuple[int, ...]:
    parts = [p.strip() for p in raw.split(",")]
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise OptionError(
            f"option streams = {raw!r} is not allowed: expected stream ids (integers of 0 or more), comma-separated"
        )
    streams = tuple(dict.fromkeys(int(p) for p in parts))
    return streams


def sluice_options(options: Mapping[str, Any]) -> SluiceOptions:
    """The ``sluice`` source's options:

    ``tracker`` (HOST:PORT, required), ``streams`` ("0"), ``records`` (``kafka``: the Kafka source's
    schema, or ``value``), ``includeHeaders`` (false: with ``kafka``, Spark's ``headers`` column),
    ``blockStore`` (URL; default the one each block's location names),
    ``blockStoreOptions`` (JSON, a ``[block_store.options]`` table), ``authTokenFile``, ``tls``
    (true: TLS with the system's CAs), ``tlsCaFile`` (TLS trusting this CA), ``tlsCertFile`` and
    ``tlsKeyFile`` (a client certificate, for a tracker that requires one), ``requestTimeoutMs``,
    the batch bounds ``maxOffsetsPerTrigger``, ``admission`` (true), ``triggerIntervalMs`` (1000),
    and ``badRecords`` with ``deadLetter`` (:func:`bad_record_handling`).
    """
    o = _lower(options)
    tracker = o.get("tracker", "").strip()
    if not tracker:
        raise OptionError("option tracker is missing: give the tracker's HOST:PORT")
    try:
        tracker_hosts = {parse_address(address)[0] for address in parse_addresses(tracker)}
    except ValueError as exc:
        raise OptionError(f"option tracker = {tracker!r} is not allowed: {exc}") from None
    token_file = _allowed_file(o, "authTokenFile")
    hosts = {h.strip() for h in os.environ.get(TRACKER_HOSTS_ENV, "").split(",") if h.strip()}
    if token_file is not None and any(not is_loopback(h) and h not in hosts for h in tracker_hosts):
        raise OptionError(
            f"option authTokenFile is not allowed with tracker {tracker!r}: the token goes only to a loopback "
            f"tracker or a host of {TRACKER_HOSTS_ENV} ({', '.join(sorted(hosts)) or 'unset'})"
        )
    timeout = _int(o, "requestTimeoutMs", 10_000, 1)
    assert timeout is not None
    ca = _allowed_file(o, "tlsCaFile")
    cert, key = _allowed_file(o, "tlsCertFile"), _allowed_file(o, "tlsKeyFile")
    if bool(cert) != bool(key):
        raise OptionError(
            "options tlsCertFile and tlsKeyFile must be given together (a client certificate and its key)"
        )
    settings = SluiceOptions(
        tracker=tracker,
        streams=_streams(o.get("streams", "0")),
        records=_choice(o, "records", "kafka", ("kafka", "value")),
        include_headers=_bool(o, "includeHeaders", False),
        block_store=_optional_str(o, "blockStore"),
        block_store_options=_json_map(o, "blockStoreOptions"),
        auth_token_file=token_file,
        tls_ca_file=ca,
        tls_cert_file=cert,
        tls_key_file=key,
        tls=_bool(o, "tls", False) or ca is not None or cert is not None,
        request_timeout_s=timeout / 1000,
        limits=_admission(o),
        bad_records=bad_record_handling(o),
    )
    _refuse_unknown(options, SLUICE_OPTIONS, "sluice source", kafka=False)
    return settings
