"""The plugin contract: three pluggy hooks of the project ``sluice``, entry-point group ``sluice``.

A plugin is a module named by an entry point in the ``sluice`` group of an installed
distribution, e.g. in its ``pyproject.toml``::

    [project.entry-points.sluice]
    my_plugin = "my_package.plugin"

That module implements one or more of the hooks below, each marked with
``pluggy.HookimplMarker("sluice")`` (a plugin needs no import of Sluice: the marker is made from
the project name)::

    hookimpl = pluggy.HookimplMarker("sluice")

    @hookimpl
    def sluice_register_estimators():
        return {"my-rate": lambda batch_interval_ms, options: MyEstimator(batch_interval_ms, **options)}

Every hook returns ``{name: factory}`` and takes no argument.  Rules Sluice enforces for all three
(:mod:`sluice.plugins`): names are non-empty strings and factories are callables; a name
registered twice (built-ins included) is an error naming both plugins and neither is offered; a
plugin that fails to import, whose hook raises or that implements none of these hooks is reported
with its entry point, and the other plugins stay available.  Sluice's own estimators, sources and
block stores are registered by import (:data:`sluice.plugins.BUILTINS`, no entry point needed) and
answer these same hooks, so they follow the same rules.

Each hook is called once per plugin when its registry is first needed in a process (a service
start, the first block a Spark task reads): keep it cheap, free of side effects and of heavy
imports; import what a factory needs inside the factory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pluggy

PROJECT_NAME = "sluice"
ENTRY_POINT_GROUP = "sluice"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = [
    "PROJECT_NAME",
    "ENTRY_POINT_GROUP",
    "hookspec",
    "hookimpl",
    "sluice_register_estimators",
    "sluice_register_sources",
    "sluice_register_block_stores",
]


@hookspec
def sluice_register_estimators() -> Mapping[str, Callable[[int, Mapping[str, Any]], Any]]:
    """Rate estimators: ``{name: factory}``; ``factory(batch_interval_ms, options: dict)`` -> estimator.

    The estimator has ``compute(time_ms, elements, processing_delay_ms, scheduling_delay_ms)
    -> float | None`` (records/s; ``None`` = no new estimate), and may opt into in-flight signals
    with ``observe(signals: InFlight) -> float | None`` (``sluice.estimators.base``: called between
    completions with the running and queued batches, the tracker's backlog, the receivers' lag
    and the rate in force).  The factory must reject options it
    does not know with a ``ValueError`` naming them: it runs when the driver starts, so a wrong
    option stops the driver before the first batch.  ``estimator.name`` selects by name; a non-PID
    estimator gets the ``[estimator.options]`` table as ``options``.
    """


@hookspec
def sluice_register_sources() -> Mapping[str, Callable[[Mapping[str, Any]], Any]]:
    """Receiver sources: ``{name: factory}``; ``factory(options: dict)`` -> a receiver.

    The receiver is a :class:`sluice.receiver.Receiver` subclass: ``on_start`` starts reading (spawn
    a task with ``self.spawn``), records go in with ``await self.store(...)`` /
    ``await self.store_many(...)``, ``on_stop`` releases the source.  ``receiver.source`` selects by
    name; a plugin source gets the ``[receiver.source_options]`` table as ``options`` (a built-in
    gets its own section, e.g. ``[kafka]``).  The factory runs once per receiver when a worker
    starts: raise ``ValueError`` naming a bad option, and the worker stops before it reads anything.
    """


@hookspec
def sluice_register_block_stores() -> Mapping[str, Callable[..., Any]]:
    """Block stores: ``{url scheme: factory}``; ``factory(url: str)`` -> a block store, or
    ``factory(url, options: dict)`` when the ``[block_store.options]`` table is set.

    The store satisfies :class:`sluice.storage.BlockStore`: ``encode``/``write_encoded`` (durable
    before it returns a location URL of the same scheme), ``read(location)`` (raises
    ``BlockMissingError``/``BlockCorruptError`` naming the block) and ``delete``.  The scheme of
    ``receiver.block_store`` selects the store; Spark tasks open it again from the same URL (or
    from a block's location) and the options the driver sends, so the factory must be importable on
    every executor.
    """
