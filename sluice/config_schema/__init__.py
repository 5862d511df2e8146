"""The configuration schema: every key of every Sluice service, declared once, a module per section.

Each :class:`~sluice.config_key.Key` names its section, flag, type, default and what is allowed;
:mod:`sluice.config` reads TOML files, the environment and flags against this list, the typed
settings (:mod:`sluice.settings`) take their defaults from it, and the configuration reference in
docs/ is generated from it, in this order.
"""

from __future__ import annotations

from sluice.config_key import Key
from sluice.config_schema import driver, rate_control, receiver, shared, sources, tracker
from sluice.config_schema.shared import DEFAULT_BLOCK_STORE as DEFAULT_BLOCK_STORE
from sluice.config_schema.shared import PID_DEFAULTS as PID_DEFAULTS
from sluice.config_schema.shared import Trigger as Trigger

SCHEMA: tuple[Key, ...] = (*shared.KEYS, *tracker.KEYS, *receiver.KEYS, *sources.KEYS, *rate_control.KEYS, *driver.KEYS)

SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(k.section for k in SCHEMA))
