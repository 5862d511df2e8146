"""Sluice tracker: ReceivedBlockTracker, receiver registry, write-ahead log, msgpack RPC (``sluice-tracker``).

Imports are lazy so that a receiver or a driver importing the client does not load the server.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TrackerClient": "client",
    "TrackerUnavailable": "client",
    "TrackerAuthError": "client",
    "AddBlockResult": "received_block_tracker",
    "ReceivedBlockTracker": "received_block_tracker",
    "SyncTrackerClient": "sync_client",
    "RemoteError": "protocol",
    "TrackerServer": "server",
    "TrackerService": "service",
    "WriteAheadLog": "wal",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
