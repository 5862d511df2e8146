"""The plugin contract: one pluggy hook, project name ``sluice``, entry-point group ``sluice``.

A plugin is a module (or any object) named by an entry point in the ``sluice`` group of an
installed distribution, e.g. in its ``pyproject.toml``::

    [project.entry-points.sluice]
    my_estimators = "my_package.plugin"

and that module implements the hook below, marked with ``pluggy.HookimplMarker("sluice")`` (a
plugin needs no import of Sluice: the marker is made from the project name)::

    hookimpl = pluggy.HookimplMarker("sluice")

    @hookimpl
    def sluice_register_estimators():
        return {"my-rate": lambda batch_interval_ms, options: MyEstimator(batch_interval_ms, **options)}

Rules Sluice enforces (see ``estimators.plugins``): names are non-empty strings and factories
are callables; a name registered by two plugins (built-ins included) is an error naming both;
a plugin that fails to import or whose hook raises is reported with its entry point and the
other plugins stay available.  Built-ins register through this same hook
(``estimators.builtin``), so they follow the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pluggy

PROJECT_NAME = "sluice"
ENTRY_POINT_GROUP = "sluice"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = ["PROJECT_NAME", "ENTRY_POINT_GROUP", "hookspec", "hookimpl", "sluice_register_estimators"]


@hookspec
def sluice_register_estimators() -> Mapping[str, Callable[[int, Mapping[str, Any]], Any]]:
    """Return ``{name: factory}``; ``factory(batch_interval_ms, options: dict)`` -> estimator.

    The estimator has ``compute(time_ms, elements, processing_delay_ms, scheduling_delay_ms)
    -> float | None`` (records/s; ``None`` = no new estimate).  The factory must reject options
    it does not know with a ``ValueError`` naming them.  Called once per plugin each time the
    registry is built; keep it cheap and free of side effects.
    """
