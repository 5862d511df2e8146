"""Sluice tracker: ReceivedBlockTracker, receiver registry, write-ahead log, msgpack RPC.

Imports are lazy so that ``import tracker.config`` (which every service does) stays cheap.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "TrackerClient": "client", "TrackerUnavailable": "client", "TrackerAuthError": "client",
    "AddBlockResult": "received_block_tracker", "ReceivedBlockTracker": "received_block_tracker",
    "SyncTrackerClient": "sync_client", "RemoteError": "protocol",
    "ReceivedBlockInfo": "block_info", "OffsetRange": "block_info", "InvalidMessage": "block_info",
    "TrackerServer": "server", "TrackerService": "service", "WriteAheadLog": "wal",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tracker' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
