"""Lazy package exports that type checkers still see as the real classes.

A service package names its public classes at the top (``sluice.tracker.TrackerClient``) without
importing their modules until first use: a receiver importing the client must not load the
tracker's server, nor a driver PySpark's session machinery before it needs it.  Each package
imports the same names under ``if TYPE_CHECKING:`` for mypy and IDEs, and installs the module
``__getattr__`` built here only when not type checking: a name missing from those imports is then
an error for mypy (as a misspelt name is), not a silent ``Any``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: ``exports`` maps a name to the module defining it."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
