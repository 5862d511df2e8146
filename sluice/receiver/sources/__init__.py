"""The built-in sources, registered through the ``sluice_register_sources`` hook like a plugin's.

This package is the ``sluice-sources`` built-in plugin (:data:`sluice.plugins.BUILTINS`).  Each factory
takes the source's options (a built-in's own configuration section, e.g. ``[kafka]``) and imports
its module only when called, so asking which sources exist never imports aiokafka.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.hookspecs import hookimpl
from sluice.plugins import lazy

SOURCES: dict[str, Callable[..., Any]] = {
    "kafka": lazy("sluice.receiver.sources.kafka:KafkaReceiver.from_options"),
    "socket": lazy("sluice.receiver.sources.socket:SocketReceiver.from_options"),
    "generator": lazy("sluice.receiver.sources.generator:GeneratorReceiver.from_options"),
}


@hookimpl
def sluice_register_sources() -> dict[str, Callable[..., Any]]:
    """The built-in sources, through the plugin hook."""
    return dict(SOURCES)
