"""Rate estimators by name: the ``sluice_register_estimators`` registry (:mod:`sluice.plugins`).

The generic registry finds the names; this module adds what is particular to estimators: the
batch interval is checked before any factory runs, a factory's ``ValueError`` (a bad option) passes
through unchanged, any other exception becomes a :class:`~sluice.plugins.PluginError` naming the
plugin, and what a factory built must have ``compute``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real
from typing import Any

from sluice.errors import InvalidArgument
from sluice.estimators.base import RateEstimator
from sluice.plugins import PluginError, PluginFailure, Registry, registry

__all__ = ["available", "create", "plugin_failures", "estimator_registry"]

HOOK = "sluice_register_estimators"


def estimator_registry() -> Registry:
    """The estimators registered by Sluice and the installed plugins."""
    return registry(HOOK)


def available() -> list[str]:
    """Names of the estimators that can be created (built-ins and plugins), sorted."""
    return estimator_registry().available()


def create(name: str, batch_interval_ms: int, options: Mapping[str, Any] | None = None) -> RateEstimator:
    """Build the estimator registered as ``name`` for batches of ``batch_interval_ms``."""
    if (
        isinstance(batch_interval_ms, bool)
        or not isinstance(batch_interval_ms, Real)
        or not (math.isfinite(batch_interval_ms) and batch_interval_ms > 0)
    ):
        raise InvalidArgument(
            f"batch_interval_ms must be a finite number > 0 (milliseconds), got {batch_interval_ms!r}"
        )
    reg = estimator_registry().lookup(name)
    try:
        estimator = reg.factory(batch_interval_ms, dict(options or {}))
    except ValueError:
        raise
    except Exception as exc:
        raise PluginError(
            f"rate estimator {name!r} of {reg.describe()} could not be built: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(getattr(estimator, "compute", None)):
        raise PluginError(
            f"rate estimator {name!r} of {reg.describe()} built {estimator!r}, which has no compute() method"
        )
    return estimator


def plugin_failures() -> list[PluginFailure]:
    """The plugins that could not contribute estimators, for a diagnostics command or a status page."""
    return estimator_registry().failures
