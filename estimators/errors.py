"""Errors of the plugin registry; each message names the estimator or plugin and what to do."""

from __future__ import annotations

__all__ = ["PluginError", "UnknownEstimatorError", "DuplicateEstimatorError"]


class PluginError(Exception):
    """A problem with an estimator plugin (or the estimator it built)."""


class UnknownEstimatorError(PluginError, ValueError):
    """No plugin registers that name; the message lists the names that exist.

    Also a ``ValueError``: an unknown ``estimator.name`` is a bad configuration value.
    """


class DuplicateEstimatorError(PluginError):
    """Two plugins register the same name; the message names both."""
