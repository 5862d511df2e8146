"""Rate estimators for Sluice's backpressure: Spark's PID, a constant, and pluggy plugins.

Pure and free of service concerns (it imports only the core, pluggy and prometheus-client), so the
driver, the arena and plugins can all use it.  ``create(name, batch_interval_ms, options)``
builds any registered estimator; ``RateController`` turns completed batches into published
rates and keeps a bad estimate from ever reaching the receivers.
"""

from __future__ import annotations

from sluice.estimators.base import EstimatorFactory, RateEstimator
from sluice.estimators.builtin import config_options
from sluice.estimators.constant import ConstantEstimator
from sluice.estimators.controller import FAILURE_REASONS, RateController
from sluice.estimators.pid import PIDRateEstimator, PIDTerms
from sluice.estimators.plugins import available, create, plugin_failures
from sluice.hookspecs import hookimpl
from sluice.plugins import DuplicateNameError, PluginError, PluginFailure, UnknownNameError

__all__ = [
    "RateEstimator",
    "EstimatorFactory",
    "PIDRateEstimator",
    "PIDTerms",
    "ConstantEstimator",
    "available",
    "create",
    "plugin_failures",
    "PluginFailure",
    "config_options",
    "hookimpl",
    "RateController",
    "FAILURE_REASONS",
    "PluginError",
    "UnknownNameError",
    "DuplicateNameError",
]
