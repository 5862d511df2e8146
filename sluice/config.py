"""Reading one configuration for every Sluice service: TOML, environment, flags.

Each key is declared once, in :mod:`sluice.config_schema` (section, name, type, default, what is
allowed), so a TOML file, an environment variable ``SLUICE_<SECTION>_<KEY>`` and a command-line flag
all mean the same thing and the configuration reference in docs/ is generated from the same list.
Precedence is :data:`PRECEDENCE`.
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
from typing import Any

from sluice.config_key import (
    ConfigError,
    Key,
    did_you_mean,
)
from sluice.config_schema import PID_DEFAULTS as PID_DEFAULTS
from sluice.config_schema import SCHEMA as SCHEMA
from sluice.config_schema import SECTIONS as SECTIONS
from sluice.config_schema import Trigger as Trigger
from sluice.files import MAX_CONFIG_BYTES, read_small_file

# the auth token of a hello: what a pre-hello frame (4096 bytes) holds beside the hello's other
# fields, in UTF-8 bytes; the tracker's request schema (sluice.tracker.wire.schema) holds hellos to it
MAX_TOKEN = 3968
MAX_TOKEN_FILE_BYTES = MAX_TOKEN + 128  # 4096: a token of MAX_TOKEN bytes and whitespace around it

PRECEDENCE = (
    "Precedence, highest first: a flag, then the environment (SLUICE_<SECTION>_<KEY>), then the "
    "--config TOML file, then the default. One exception, for rates: the driver starts from the rate "
    "the tracker remembers (the last one published) rather than backpressure.initial_rate, unless "
    "backpressure.resume_rate is false."
)


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
    text = read_small_file(path, "config file", MAX_CONFIG_BYTES)
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (as TOML must be): {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables by recursion
        raise ConfigError(
            f"config file {path} nests too deep to read; allowed: tables and arrays a few levels deep"
        ) from None
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
    """The auth token in ``path`` (stripped), or None when no file is configured.

    The file is read through :func:`~sluice.files.read_small_file` (a regular file of at most
    :data:`MAX_TOKEN_FILE_BYTES`), and the token must fit the hello that carries it
    (:data:`MAX_TOKEN` bytes of UTF-8): a longer one would only be
    refused by the tracker at every connection, far from the file that is wrong."""
    if not path:
        return None
    data = read_small_file(path, "auth token file", MAX_TOKEN_FILE_BYTES)
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"auth token file {path} is not UTF-8 text") from None
    if not token:
        raise ConfigError(f"auth token file {path} is empty")
    if len(token.encode()) > MAX_TOKEN:
        raise ConfigError(
            f"auth token file {path} holds a token of {len(token.encode()):,} bytes; allowed: at most {MAX_TOKEN:,}"
        )
    return token


def reference_table() -> str:
    """The table of docs/reference/configuration.md, generated from :data:`SCHEMA`."""
    rows = ["| key | default | environment | allowed | meaning |", "|---|---|---|---|---|"]
    for k in SCHEMA:
        default = "" if k.default in ("", {}) else f"`{k.default!r}`".replace("'", '"')
        rows.append(f"| `{k.dotted}` | {default} | `{k.env}` | {k.describe_allowed()} | {k.help} |")
    return "\n".join(rows)
