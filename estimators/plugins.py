"""The estimator registry: pluggy, project ``sluice``, entry-point group ``sluice``.

The registry is rebuilt on every call of ``available``/``create``: they run once at start-up,
and rebuilding means a newly installed plugin (or a test's dist-info) is seen without a restart
or a cache to invalidate.

Isolation is the point of the extra code here.  pluggy's ``load_setuptools_entrypoints(group)``
stops at the first entry point that fails to import, and ``hook.sluice_register_estimators()``
stops at the first plugin whose hook raises, so one broken plugin would hide every other one.
Instead entry points are loaded one name at a time (``load_setuptools_entrypoints(group,
name=...)``) and each plugin's hook is called on its own; failures are kept as
``PluginFailure``s, logged once per process, and quoted when a name cannot be found.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import pluggy

from sluice.estimators import builtin, hookspecs
from sluice.estimators.base import EstimatorFactory, RateEstimator
from sluice.estimators.errors import DuplicateEstimatorError, PluginError, UnknownEstimatorError

log = logging.getLogger("sluice.estimators")

__all__ = ["PluginFailure", "Registration", "Registry", "build_registry", "available", "create",
           "plugin_failures"]

BUILTIN_PLUGIN = "builtin"
_logged: set[str] = set()


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not contribute: ``plugin`` is its entry point name."""

    plugin: str
    origin: str
    error: str

    def __str__(self) -> str:
        return f"plugin {self.plugin!r} ({self.origin}): {self.error}"


@dataclass(frozen=True)
class Registration:
    """One estimator name and the plugin that registered it."""

    name: str
    factory: EstimatorFactory
    plugin: str
    origin: str

    def describe(self) -> str:
        return f"plugin {self.plugin!r} ({self.origin})"


@dataclass
class Registry:
    """Everything the hook produced: usable names, clashing names, and plugins that failed."""

    registrations: dict[str, list[Registration]] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)

    def available(self) -> list[str]:
        """Names that ``create`` can build (registered exactly once), sorted."""
        return sorted(n for n, regs in self.registrations.items() if len(regs) == 1)

    def lookup(self, name: str) -> Registration:
        regs = self.registrations.get(name, [])
        if len(regs) > 1:
            who = " and ".join(r.describe() for r in regs)
            raise DuplicateEstimatorError(
                f"rate estimator {name!r} is registered twice, by {who}; uninstall or rename one")
        if not regs:
            names = ", ".join(self.available()) or "none"
            msg = f"unknown rate estimator {name!r}; available: {names}"
            if self.failures:
                msg += "; plugins that failed to load: " + "; ".join(map(str, self.failures))
            raise UnknownEstimatorError(msg)
        return regs[0]

    def create(self, name: str, batch_interval_ms: int,
               options: Mapping[str, Any] | None = None) -> RateEstimator:
        """Build estimator ``name``; its factory's ``ValueError`` (bad option) passes through."""
        if isinstance(batch_interval_ms, bool) or not isinstance(batch_interval_ms, Real) or not (
                math.isfinite(batch_interval_ms) and batch_interval_ms > 0):
            raise ValueError(f"batch_interval_ms must be a finite number > 0 (milliseconds), "
                             f"got {batch_interval_ms!r}")
        reg = self.lookup(name)
        try:
            estimator = reg.factory(batch_interval_ms, dict(options or {}))
        except ValueError:
            raise
        except Exception as exc:
            raise PluginError(f"rate estimator {name!r} of {reg.describe()} could not be built: "
                              f"{type(exc).__name__}: {exc}") from exc
        if not callable(getattr(estimator, "compute", None)):
            raise PluginError(f"rate estimator {name!r} of {reg.describe()} built "
                              f"{estimator!r}, which has no compute() method")
        return estimator


def _fail(failures: list[PluginFailure], plugin: str, origin: str, error: str) -> None:
    failure = PluginFailure(plugin, origin, error)
    failures.append(failure)
    if str(failure) not in _logged:  # rebuilt per call: say it once per process, not per call
        _logged.add(str(failure))
        log.warning("estimator %s; the other estimators stay available", failure)


def _dist_label(dist: importlib.metadata.Distribution) -> str:
    return f"{dist.metadata['Name']} {dist.version}"


def _load_entry_points(pm: pluggy.PluginManager, failures: list[PluginFailure]) -> dict[str, str]:
    """Register each ``sluice`` entry point on its own; return ``{plugin name: origin}``."""
    origins: dict[str, str] = {BUILTIN_PLUGIN: "built-in, estimators.builtin"}
    seen: dict[str, tuple[str, str]] = {}
    for dist in list(importlib.metadata.distributions()):
        for ep in dist.entry_points:
            if ep.group != hookspecs.ENTRY_POINT_GROUP:
                continue
            origin = f"entry point {ep.name} = {ep.value} in {_dist_label(dist)}"
            if ep.name in seen:
                if seen[ep.name][0] != ep.value:  # the same dist seen twice on sys.path is fine
                    _fail(failures, ep.name, origin,
                          f"entry point name already used by {seen[ep.name][1]}; ignored")
                continue
            seen[ep.name] = (ep.value, origin)
            if pm.has_plugin(ep.name):
                _fail(failures, ep.name, origin, "entry point name is reserved; ignored")
                continue
            try:
                pm.load_setuptools_entrypoints(hookspecs.ENTRY_POINT_GROUP, name=ep.name)
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not hide the others
                _fail(failures, ep.name, origin, f"failed to load: {type(exc).__name__}: {exc}")
                continue
            origins[ep.name] = origin
    return origins


def build_registry() -> Registry:
    """A fresh plugin manager: built-ins first, then every ``sluice`` entry point."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(builtin, name=BUILTIN_PLUGIN)
    registry = Registry()
    origins = _load_entry_points(pm, registry.failures)
    contributed: set[str] = set()
    for impl in pm.hook.sluice_register_estimators.get_hookimpls():
        plugin, origin = impl.plugin_name, origins.get(impl.plugin_name, "registered directly")
        contributed.add(plugin)
        if impl.hookwrapper or impl.wrapper:
            _fail(registry.failures, plugin, origin, "sluice_register_estimators must not be a wrapper")
            continue
        try:
            result = impl.function()
        except Exception as exc:  # noqa: BLE001
            _fail(registry.failures, plugin, origin,
                  f"sluice_register_estimators() raised {type(exc).__name__}: {exc}")
            continue
        if not isinstance(result, Mapping):
            _fail(registry.failures, plugin, origin,
                  f"sluice_register_estimators() must return {{name: factory}}, got {result!r}")
            continue
        for name, factory in result.items():
            if not isinstance(name, str) or not name or not callable(factory):
                _fail(registry.failures, plugin, origin,
                      f"entry {name!r}: {factory!r} is not a non-empty name with a callable factory")
                continue
            registry.registrations.setdefault(name, []).append(
                Registration(name, factory, plugin, origin))
    for plugin in origins.keys() - contributed:
        _fail(registry.failures, plugin, origins[plugin],
              "registered no estimators: it has no @hookimpl sluice_register_estimators")
    return registry


def available() -> list[str]:
    """Names of the estimators that can be created (built-ins and plugins), sorted."""
    return build_registry().available()


def create(name: str, batch_interval_ms: int,
           options: Mapping[str, Any] | None = None) -> RateEstimator:
    """Build the estimator registered as ``name`` for batches of ``batch_interval_ms``."""
    return build_registry().create(name, batch_interval_ms, options)


def plugin_failures() -> list[PluginFailure]:
    """The plugins that could not contribute, for a diagnostics command or a status page."""
    return build_registry().failures
