"""The registries of Sluice's extension points: estimators, sources and block stores.

One machinery for all three.  Sluice's own modules (:data:`BUILTINS`) are registered on one pluggy
plugin manager by import, as pytest registers its own plugins, so they are there wherever the
package imports, with or without its distribution's metadata (executors fed by ``--py-files``);
then every entry point of the ``sluice`` group, which is for third parties only.  Built-ins and
plugins answer the same hooks and follow the same rules, and :func:`registry` collects one hook's
``{name: factory}`` answers into a :class:`Registry`.  The result is kept for the life of the
process (a Spark task opens a block store per block; the registry must not rescan the installed
distributions each time); :func:`refresh` forgets it.

Precedence is refused rather than guessed: a plugin that registers a name a built-in registers
makes the name a :class:`DuplicateNameError` naming both, and an entry point named like a built-in
(``sluice-estimators``) is ignored and reported.  An entry point naming a built-in's own module
(the metadata of an older Sluice that listed its built-ins as entry points) is the same plugin and
is skipped without a word.

Isolation is the point of the extra code here.  pluggy's ``load_setuptools_entrypoints(group)``
stops at the first entry point that fails to import, and ``hook.sluice_register_sources()`` stops at
the first plugin whose hook raises, so one broken plugin would hide every other one.  Instead each
plugin is loaded on its own and each plugin's hook is called on its own; failures are kept as
:class:`PluginFailure`, logged, and quoted when a name cannot be found.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

from sluice import hookspecs
from sluice.errors import InvalidArgument, SluiceError

log = logging.getLogger(__name__)

__all__ = [
    "PluginError",
    "UnknownNameError",
    "DuplicateNameError",
    "PluginFailure",
    "Registration",
    "Registry",
    "BUILTINS",
    "HOOKS",
    "registry",
    "refresh",
    "lazy",
]

BUILTINS: dict[str, str] = {  # plugin name -> Sluice's own module, registered by import
    "sluice-estimators": "sluice.estimators.builtin",
    "sluice-sources": "sluice.receiver.sources",
    "sluice-block-stores": "sluice.storage",
}

HOOKS: dict[str, str] = {  # hook name -> what it registers, as an error message says it
    "sluice_register_estimators": "rate estimator",
    "sluice_register_sources": "source",
    "sluice_register_block_stores": "block store",
}


class PluginError(SluiceError):
    """A problem with a plugin or with what it built; the message names the plugin."""


class UnknownNameError(PluginError, ValueError):
    """No plugin registers that name; the message lists the names that exist.

    Also a ``ValueError``: an unknown name in the configuration is a bad configuration value.
    """


class DuplicateNameError(PluginError):
    """Two plugins register the same name; the message names both."""


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not contribute.

    :param plugin: its entry point name.
    :param origin: where it comes from (entry point, value and distribution), for the user.
    :param error: what went wrong.
    """

    plugin: str
    origin: str
    error: str

    def __str__(self) -> str:
        return f"plugin {self.plugin!r} ({self.origin}): {self.error}"


@dataclass(frozen=True)
class Registration:
    """One registered name.

    :param name: the name users select it by (an estimator name, a source name, a URL scheme).
    :param factory: what the hook returned for it.
    :param plugin: the entry point name of the plugin that registered it.
    :param origin: where that plugin comes from.
    :param builtin: one of Sluice's own (:data:`BUILTINS`).
    """

    name: str
    factory: Callable[..., Any]
    plugin: str
    origin: str
    builtin: bool = False

    def describe(self) -> str:
        return f"plugin {self.plugin!r} ({self.origin})"


@dataclass
class Registry:
    """Everything one hook produced: usable names, clashing names, and plugins that failed.

    :param kind: what the names are, for messages (``"source"``).

    :param registrations: every name with the registrations that claim it (two: a clash).
    :param failures: the plugins that could not contribute to this hook, or failed to load.
    """

    kind: str
    registrations: dict[str, list[Registration]] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)

    def available(self) -> list[str]:
        """Names that can be used (registered exactly once), sorted."""
        return sorted(n for n, regs in self.registrations.items() if len(regs) == 1)

    def builtin(self) -> list[str]:
        """The usable names Sluice itself registers, sorted (for the configuration reference)."""
        return [n for n in self.available() if self.registrations[n][0].builtin]

    def lookup(self, name: str) -> Registration:
        """The registration of ``name``; an error naming the alternatives when there is none or two."""
        regs = self.registrations.get(name, [])
        if len(regs) > 1:
            who = " and ".join(r.describe() for r in regs)
            raise DuplicateNameError(f"{self.kind} {name!r} is registered twice, by {who}; uninstall or rename one")
        if not regs:
            msg = f"unknown {self.kind} {name!r}; available: {', '.join(self.available()) or 'none'}"
            if self.failures:
                msg += "; plugins that failed to load: " + "; ".join(map(str, self.failures))
            raise UnknownNameError(msg)
        return regs[0]


@dataclass
class _Plugins:
    """Every ``sluice`` entry point loaded once: the manager, each plugin's origin, load failures."""

    manager: pluggy.PluginManager
    origins: dict[str, str]
    builtins: set[str]
    failures: list[PluginFailure]


_lock = threading.Lock()
_plugins: _Plugins | None = None
_registries: dict[str, Registry] = {}


def _fail(failures: list[PluginFailure], plugin: str, origin: str, error: str) -> None:
    failure = PluginFailure(plugin, origin, error)
    failures.append(failure)
    log.warning("%s; the other plugins stay available", failure)


def _register(plugins: _Plugins, name: str, origin: str, load: Callable[[], object], builtin: bool) -> None:
    """Load one plugin and register it; a plugin that fails to load is a failure, not an error."""
    try:
        plugins.manager.register(load(), name=name)
    except Exception as exc:  # noqa: BLE001 - a broken plugin must not hide the others
        _fail(plugins.failures, name, origin, f"failed to load: {type(exc).__name__}: {exc}")
        return
    plugins.origins[name] = origin
    if builtin:
        plugins.builtins.add(name)
    hooks = {caller.name for caller in plugins.manager.get_hookcallers(plugins.manager.get_plugin(name)) or ()}
    if not hooks & HOOKS.keys():
        _fail(plugins.failures, name, origin, f"registered nothing: it has no @hookimpl of {', '.join(HOOKS)}")


def _load() -> _Plugins:
    """The built-ins by import, then each ``sluice`` entry point on its own."""
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    plugins = _Plugins(manager, {}, set(), [])
    seen: dict[str, tuple[str, str]] = {}  # plugin name -> (module, origin)
    for name, module in BUILTINS.items():
        origin = f"built-in, {module}"
        seen[name] = (module, origin)
        _register(plugins, name, origin, functools.partial(importlib.import_module, module), builtin=True)
    # by distribution name: messages list the plugins in the same order every time
    for dist in sorted(importlib.metadata.distributions(), key=lambda d: d.metadata["Name"] or ""):
        for ep in dist.entry_points:
            if ep.group != hookspecs.ENTRY_POINT_GROUP or ep.value in BUILTINS.values():
                continue  # a built-in's module is registered already, whatever the entry point calls it
            origin = f"entry point {ep.name} = {ep.value} in {dist.metadata['Name']} {dist.version}"
            if ep.name in seen:
                used_by = seen[ep.name][1]
                if seen[ep.name][0] != ep.value:  # the same distribution seen twice on sys.path is fine
                    _fail(plugins.failures, ep.name, origin, f"entry point name already used by {used_by}; ignored")
                continue
            seen[ep.name] = (ep.value, origin)
            _register(plugins, ep.name, origin, ep.load, builtin=False)
    return plugins


def _collect(plugins: _Plugins, hook: str) -> Registry:
    """Call ``hook`` of each plugin on its own and gather the names it returns."""
    registry = Registry(HOOKS[hook], failures=list(plugins.failures))
    for impl in getattr(plugins.manager.hook, hook).get_hookimpls():
        plugin = impl.plugin_name
        origin = plugins.origins.get(plugin, "registered directly")
        if impl.hookwrapper or impl.wrapper:
            _fail(registry.failures, plugin, origin, f"{hook} must not be a wrapper")
            continue
        try:
            result = impl.function()
        except Exception as exc:  # noqa: BLE001 - a plugin bug costs that plugin only
            _fail(registry.failures, plugin, origin, f"{hook}() raised {type(exc).__name__}: {exc}")
            continue
        if not isinstance(result, Mapping):
            _fail(registry.failures, plugin, origin, f"{hook}() must return {{name: factory}}, got {result!r}")
            continue
        for name, factory in result.items():
            if not isinstance(name, str) or not name or not callable(factory):
                _fail(
                    registry.failures,
                    plugin,
                    origin,
                    f"entry {name!r}: {factory!r} is not a non-empty name with a callable factory",
                )
                continue
            registry.registrations.setdefault(name, []).append(
                Registration(name, factory, plugin, origin, plugin in plugins.builtins)
            )
    return registry


def registry(hook: str) -> Registry:
    """The registry of ``hook`` (one of :data:`HOOKS`), built on first use in this process."""
    global _plugins
    if hook not in HOOKS:
        raise InvalidArgument(f"unknown hook {hook!r}; hooks are {', '.join(HOOKS)}")
    with _lock:
        found = _registries.get(hook)
        if found is None:
            if _plugins is None:
                _plugins = _load()
            found = _registries[hook] = _collect(_plugins, hook)
        return found


def refresh() -> None:
    """Forget the loaded plugins: the next :func:`registry` call scans the installed ones again."""
    global _plugins
    with _lock:
        _plugins = None
        _registries.clear()


def lazy(target: str) -> Callable[..., Any]:
    """A factory that imports ``"module:attribute"`` only when called, and calls it.

    A registration costs one line and no import: checking the configuration asks the source
    registry for the allowed names, and that must not import aiokafka.
    """
    module_name, _, attribute = target.partition(":")

    def factory(*args: Any, **kwargs: Any) -> Any:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):  # "module:Class.from_options" names a class method
            found = getattr(found, part)
        return found(*args, **kwargs)

    factory.__qualname__ = factory.__name__ = f"lazy({target!r})"
    return factory
