"""The built-in estimators, registered through the same pluggy hook as any plugin.

This module is the ``sluice-estimators`` built-in plugin (:data:`sluice.plugins.BUILTINS`,
registered by import), so the built-ins obey the plugin rules, and a plugin that reuses a
built-in name is caught as a duplicate instead of silently shadowing it.  Factories validate their options here, so an
option typo stops the driver at start-up with a message naming the option.

Option names are Spark's (``spark.streaming.backpressure.pid.{proportional,integral,derived,
minRate}``), spelled as Sluice's config keys ``estimator.pid.*``: ``proportional``,
``integral``, ``derived`` (Spark's spelling) and ``min_rate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.config import PID_DEFAULTS
from sluice.errors import InvalidArgument
from sluice.estimators.base import EstimatorFactory
from sluice.estimators.constant import ConstantEstimator
from sluice.estimators.pid import PIDRateEstimator
from sluice.hookspecs import hookimpl
from sluice.plugins import lazy

__all__ = ["FACTORIES", "pid_factory", "constant_factory", "config_options", "sluice_register_estimators"]


def _options(
    estimator: str, options: Mapping[str, Any] | None, allowed: Mapping[str, float | None]
) -> dict[str, float]:
    """Check names and values of ``options``; ``allowed`` maps each name to its default (None:
    required).  Numbers and numeric strings (from environment variables) are accepted."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise InvalidArgument(
            f"estimator {estimator!r}: unknown option(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    result: dict[str, float] = {}
    for name, default in allowed.items():
        value = options.get(name, default)
        if value is None:
            raise InvalidArgument(f"estimator {estimator!r}: option {name!r} is required")
        if isinstance(value, bool):
            raise InvalidArgument(f"estimator {estimator!r}: option {name!r} must be a number, got {value!r}")
        try:
            result[name] = float(value)
        except (TypeError, ValueError):
            raise InvalidArgument(f"estimator {estimator!r}: option {name!r} must be a number, got {value!r}") from None
    return result


def pid_factory(batch_interval_ms: int, options: Mapping[str, Any] | None = None) -> PIDRateEstimator:
    """``pid``: Spark's PIDRateEstimator; options proportional, integral, derived, min_rate."""
    o = _options("pid", options, PID_DEFAULTS)
    return PIDRateEstimator(
        batch_interval_ms,
        proportional=o["proportional"],
        integral=o["integral"],
        derivative=o["derived"],
        min_rate=o["min_rate"],
    )


def constant_factory(batch_interval_ms: int, options: Mapping[str, Any] | None = None) -> ConstantEstimator:
    """``constant``: a fixed rate; option ``rate`` (records/s, required)."""
    return ConstantEstimator(_options("constant", options, {"rate": None})["rate"])


def config_options(name: str, section: Mapping[str, Any]) -> dict[str, Any]:
    """The ``options`` for ``create(name, ...)`` from the resolved ``[estimator]`` config section.

    ``pid`` takes the ``pid.*`` keys with the prefix removed; any other estimator takes the
    ``options`` table as given.  One place for this mapping, so the driver cannot drift from it.
    """
    if name == "pid":
        return {key[len("pid.") :]: value for key, value in section.items() if key.startswith("pid.")}
    return dict(section.get("options") or {})


FACTORIES: dict[str, EstimatorFactory] = {
    "pid": pid_factory,
    "constant": constant_factory,
    "adaptive": lazy("sluice.estimators.adaptive:adaptive_factory"),  # imported when chosen
}


@hookimpl
def sluice_register_estimators() -> dict[str, EstimatorFactory]:
    """The built-ins, through the plugin hook."""
    return dict(FACTORIES)
