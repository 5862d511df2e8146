"""A configuration key: its name in every spelling, its type and what it allows (:mod:`sluice.config`
declares the keys themselves).

Conversion is strict, because a value may come from TOML, the environment or a flag as a string:
``"yes"`` is a bool, ``1.0`` is not an int, NaN and infinities are not numbers.  Every refusal is a
:class:`ConfigError` that names the key, the value, where it came from and what is allowed.
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from sluice.errors import SluiceError
from sluice.plugins import HOOKS, PluginError, UnknownNameError, registry


class ConfigError(SluiceError, ValueError):
    """A configuration value that is not allowed; the message is one line for the user."""


def did_you_mean(value: object, names: Iterable[str], cutoff: float = 0.6) -> str:
    """``"; did you mean 'pid'?"`` for the name nearest a mistyped ``value``, or ``""``."""
    nearest = difflib.get_close_matches(str(value), list(names), n=1, cutoff=cutoff)
    return f"; did you mean {nearest[0]!r}?" if nearest else ""


@dataclass(frozen=True)
class Key:
    """One configuration key: ``section.name`` in TOML, ``--flag`` on the command line.

    :param section: the TOML section (``receiver``); also the env prefix and the flag prefix.
    :param name: the key within it (``max_rate``; dotted for a sub-table: ``pid.min_rate``).
    :param type: ``str``, ``int``, ``float``, ``bool`` or ``dict`` (a TOML table, passed on unchanged).
    :param default: the value when nothing sets it.
    :param help: what it means, one line (the reference table and ``--help``).
    :param choices: the allowed values, when they are a fixed list.
    :param check: a test of the converted value; ``allowed`` says in words what it allows.
    :param allowed: see ``check``.
    :param flags: extra flag spellings, e.g. ``("--bootstrap-servers",)``.
    :param plugins: a hook of :mod:`sluice.plugins`: the value must be a name it registers.
    :param scheme: with ``plugins``, the value is a URL whose scheme must be registered.
    """

    section: str
    name: str
    type: type  # str, int, float, bool or dict (a TOML table, passed on unchanged)
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    check: Callable[[Any], bool] | None = None
    allowed: str = ""  # what `check` allows, said in words for the error message
    flags: tuple[str, ...] = ()  # extra flag spellings, e.g. ("--bootstrap-servers",)
    plugins: str = ""  # a hook of sluice.plugins: the value must be a name it registers
    scheme: bool = False  # with plugins: the value is a URL whose scheme must be registered

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def env(self) -> str:
        return "SLUICE_" + self.dotted.replace(".", "_").upper()

    def flag(self, home: str | None) -> str:
        """``--name`` for keys of the service's own section, ``--section-name`` for the others."""
        name = self.name if self.section == home else self.dotted
        return "--" + name.replace(".", "-").replace("_", "-")

    def describe_allowed(self) -> str:
        """What is allowed, in words (a registry's built-in names, not what happens to be installed)."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.plugins:
            kind, builtin = HOOKS[self.plugins], ", ".join(registry(self.plugins).builtin())
            if self.scheme:
                return f"a URL whose scheme names a {kind}: {builtin} or a plugin's"
            return f"one of {builtin} or a plugin's {kind}"
        if self.allowed:
            return self.allowed
        return {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a table"}[
            self.type
        ]

    def coerce(self, value: Any, origin: str) -> Any:
        """Convert ``value`` (from TOML, the environment or a flag) and check it."""
        try:
            converted = _convert(self.type, value)
        except (TypeError, ValueError):
            converted = _INVALID
        if (
            converted is _INVALID
            or (self.choices and converted not in self.choices)
            or (converted is not None and self.check is not None and not self.check(converted))
        ):
            hint = did_you_mean(value, self.choices) if self.choices else ""
            raise ConfigError(
                f"{self.dotted} = {value!r} (from {origin}) is not allowed: expected {self.describe_allowed()}{hint}"
            )
        if self.plugins and converted is not None:
            self._check_registered(converted, value, origin)
        return converted

    def _check_registered(self, converted: str, value: Any, origin: str) -> None:
        """The value (or its URL scheme) must be a name the key's registry holds exactly once."""
        found = registry(self.plugins)
        try:
            found.lookup(urlparse(converted).scheme if self.scheme else converted)
        except UnknownNameError:
            names = ", ".join(found.available()) or "none"
            expected = f"a URL whose scheme is one of {names}" if self.scheme else f"one of {names}"
            hint = "" if self.scheme else did_you_mean(converted, found.available())
            failed = "".join(f"; {failure}" for failure in found.failures)
            raise ConfigError(
                f"{self.dotted} = {value!r} (from {origin}) is not allowed: expected {expected}{hint}{failed}"
            ) from None
        except PluginError as exc:
            raise ConfigError(f"{self.dotted} = {value!r} (from {origin}) is not allowed: {exc}") from None


_INVALID = object()


def _convert(kind: type, value: Any) -> Any:
    if value is None:
        return None
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        return _INVALID
    if kind is int:
        if isinstance(value, bool) or isinstance(value, float):
            return _INVALID
        return int(value)
    if kind is float:
        if isinstance(value, bool):
            return _INVALID
        result = float(value)
        return result if result == result and result not in (float("inf"), float("-inf")) else _INVALID
    if kind is dict:
        return dict(value) if isinstance(value, Mapping) else _INVALID
    return value if isinstance(value, str) else _INVALID


def _positive(v: float) -> bool:
    return v > 0


def _non_negative(v: float) -> bool:
    return v >= 0


def _host_port(v: str) -> bool:
    host, sep, port = v.rpartition(":")
    return bool(sep and host and port.isascii() and port.isdigit() and 0 < int(port) < 65536)


def _host_ports(v: str) -> bool:
    return all(_host_port(a.strip()) for a in v.split(","))


def valid_host_name(name: str) -> bool:
    """A DNS name (letters, digits, dots, hyphens, underscores) or an IP address, brackets allowed
    around an IPv6 one; no port."""
    plain = name.strip().removeprefix("[").removesuffix("]").rstrip(".")
    if not plain:
        return False
    try:
        ipaddress.ip_address(plain)
        return True
    except ValueError:
        return plain.isascii() and all(c.isalnum() or c in ".-_" for c in plain)


def _host_names(v: str) -> bool:
    return all(valid_host_name(name) for name in v.split(",") if name.strip())


def _port(v: int) -> bool:
    return 0 <= v < 65536


# What the schema's numeric and address keys allow, as Key(check=..., allowed=...) arguments.
HOST_PORT: dict[str, Any] = dict(check=_host_port, allowed="HOST:PORT with a port from 1 to 65535")
HOST_PORTS: dict[str, Any] = dict(
    check=_host_ports, allowed="HOST:PORT, or several separated by commas (a leader and its standbys)"
)
HOST_NAMES: dict[str, Any] = dict(
    check=_host_names, allowed="host names or IP addresses separated by commas (no ports), or empty for none"
)
PORT: dict[str, Any] = dict(check=_port, allowed="a port from 1 to 65535, or 0 for none")
POSITIVE: dict[str, Any] = dict(check=_positive, allowed="a number above 0")
NON_NEGATIVE: dict[str, Any] = dict(check=_non_negative, allowed="a number of 0 or more")
NONE_AT_ZERO: dict[str, Any] = dict(check=_non_negative, allowed="a number of 0 or more (0 means none)")
