"""TLS and basic auth of the metrics endpoints, read from exporter-toolkit's web configuration file.

The file is the one node_exporter and the other exporters built on Prometheus's exporter-toolkit
read (``--web.config.file``), so one file and one scrape configuration serve them all::

    tls_server_config:
      cert_file: server.pem
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # or NoClientCert (the default without a CA)
      client_ca_file: ca.pem
      min_version: TLS13                             # or TLS12 (the default)
    basic_auth_users:
      prometheus: $2b$12$...                         # bcrypt hashes only

Relative paths are taken from the file's directory, as exporter-toolkit does.  A key this module
does not read is refused at start rather than ignored: a setting that silently did nothing (a
``cipher_suites`` list, say) would leave the endpoint less protected than its operator believes.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from sluice.config_key import ConfigError, did_you_mean
from sluice.files import MAX_CONFIG_BYTES, read_small_file

log = logging.getLogger(__name__)

CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
MIN_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_KEYS = ("tls_server_config", "basic_auth_users")
_TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version")
_BCRYPT = re.compile(r"\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}")


@dataclass(frozen=True)
class WebConfig:
    """What the file asks of an endpoint: a TLS context (None: plain HTTP) and the users (bcrypt
    hashes by name; empty: no authentication)."""

    tls: ssl.SSLContext | None
    users: Mapping[str, bytes]


def _mapping(value: object, where: str, allowed: tuple[str, ...] | None) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping, not {type(value).__name__}")
    for name in value:
        if allowed is not None and name not in allowed:
            raise ConfigError(
                f"unknown key {name!r} in {where}{did_you_mean(name, allowed)}; allowed: {', '.join(allowed)}"
            )
    return value


def _choice(section: dict, name: str, choices: Mapping[str, object], default: str) -> str:
    value = section.get(name, default)
    if value not in choices:
        raise ConfigError(f"tls_server_config.{name} is {value!r}; allowed: {', '.join(choices)}")
    return str(value)


def _tls(section: dict, base: Path) -> ssl.SSLContext:
    for name in _TLS_KEYS:
        if name in section and not isinstance(section[name], str):
            raise ConfigError(f"tls_server_config.{name} must be a string")
    if not section.get("cert_file") or not section.get("key_file"):
        raise ConfigError("tls_server_config needs both cert_file and key_file (for plain HTTP, leave the section out)")
    ca = section.get("client_ca_file", "")
    client_auth = _choice(
        section, "client_auth_type", CLIENT_AUTH, "RequireAndVerifyClientCert" if ca else "NoClientCert"
    )
    if CLIENT_AUTH[client_auth] == ssl.CERT_REQUIRED and not ca:
        raise ConfigError("tls_server_config.client_auth_type RequireAndVerifyClientCert needs client_ca_file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MIN_VERSIONS[_choice(section, "min_version", MIN_VERSIONS, "TLS12")]
    cert, key = base / section["cert_file"], base / section["key_file"]
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"tls_server_config.cert_file {cert} / key_file {key} cannot be loaded: {exc}") from None
    if ca:
        try:
            context.load_verify_locations(cafile=base / ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"tls_server_config.client_ca_file {base / ca} cannot be loaded: {exc}") from None
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def _users(section: dict) -> dict[str, bytes]:
    users: dict[str, bytes] = {}
    for name, hashed in section.items():
        if not isinstance(name, str) or not name or ":" in name:
            raise ConfigError(f"basic_auth_users: {name!r} is not a user name (a non-empty string without ':')")
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise ConfigError(f"basic_auth_users.{name} is not a bcrypt hash ($2a$, $2b$ or $2y$, 60 characters)")
        users[name] = hashed.encode()
    return users


def load(path: str, key: str) -> WebConfig | None:
    """The web configuration in ``path`` (None when ``path`` is empty: plain HTTP, no users).
    Raises ConfigError naming ``key``, the file and what is allowed."""
    if not path:
        return None
    text = read_small_file(path, key, MAX_CONFIG_BYTES)
    try:
        try:
            document = yaml.safe_load(text.decode("utf-8"))
        except (UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot be read as YAML: {exc}".replace("\n", " ")) from None
        except RecursionError:  # PyYAML composes nested sequences and mappings by recursion
            raise ConfigError("nests too deep to read; allowed: the two levels of mappings shown in the docs") from None
        top = _mapping(document, "the file", _KEYS)
        # present but empty is not plain HTTP: an operator who wrote the section asked for TLS
        tls_section = _mapping(top.get("tls_server_config"), "tls_server_config", _TLS_KEYS)
        tls = _tls(tls_section, Path(path).parent) if "tls_server_config" in top else None
        users = _users(_mapping(top.get("basic_auth_users"), "basic_auth_users", None))
    except ConfigError as exc:  # raised without the file's name, which is said once here
        raise ConfigError(f"{key} {path}: {exc}") from None
    if users and tls is None:
        log.warning("%s %s: basic auth without tls_server_config: passwords travel in clear", key, path)
    return WebConfig(tls, users)
