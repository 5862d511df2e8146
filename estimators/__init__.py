"""Rate estimators for Sluice's backpressure: Spark's PID, a constant, and pluggy plugins.

Pure and free of service concerns (it imports only pluggy and prometheus-client), so the
driver, the arena and plugins can all use it.  ``create(name, batch_interval_ms, options)``
builds any registered estimator; ``RateController`` turns completed batches into published
rates and keeps a bad estimate from ever reaching the receivers.
"""

from __future__ import annotations

from estimators.base import EstimatorFactory, RateEstimator
from estimators.builtin import config_options
from estimators.constant import ConstantEstimator
from estimators.controller import FAILURE_REASONS, RateController
from estimators.errors import DuplicateEstimatorError, PluginError, UnknownEstimatorError
from estimators.hookspecs import hookimpl
from estimators.pid import PIDRateEstimator, PIDTerms
from estimators.plugins import PluginFailure, available, create, plugin_failures

__all__ = [
    "RateEstimator", "EstimatorFactory", "PIDRateEstimator", "PIDTerms", "ConstantEstimator",
    "available", "create", "plugin_failures", "PluginFailure", "config_options", "hookimpl",
    "RateController", "FAILURE_REASONS",
    "PluginError", "UnknownEstimatorError", "DuplicateEstimatorError",
]
