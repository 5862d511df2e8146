"""Settings as a log line, a status or a representation may show them: every credential hidden.

One list of which settings are secrets, below every package that shows settings (``sluice.settings``
sits under ``sluice.kafka``), so each place that shows a table redacts the same keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CREDENTIAL_KEYS", "HIDDEN", "redacted"]

# The ``kafka.client`` settings that are secrets: never shown, and each may come from a file
# (``<key>_file``) or an environment variable (``<key>_env``) instead (sluice.kafka.client_settings).
CREDENTIAL_KEYS = ("sasl_plain_password", "ssl_password")
HIDDEN = "<redacted>"


def redacted(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with every credential's value hidden (the names of its file or variable stay:
    they are what an operator checks)."""
    return {k: (HIDDEN if k in CREDENTIAL_KEYS and v else v) for k, v in settings.items()}
