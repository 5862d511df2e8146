"""Sluice tracker: ReceivedBlockTracker, receiver registry, write-ahead log, msgpack RPC (``sluice-tracker``).

Imports are lazy (:mod:`sluice._exports`) so that a receiver or a driver importing the client does
not load the server.  ``__all__`` is the supported API: the clients and what their calls return or
raise, and the server's parts for embedding a tracker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._exports import lazy_exports

if TYPE_CHECKING:
    from sluice.tracker.client import (
        AddBlockResult,
        Cleanup,
        QueuedBlocks,
        RemoteError,
        TrackerAuthError,
        TrackerClient,
        TrackerUnavailable,
    )
    from sluice.tracker.received_block_tracker import ReceivedBlockTracker
    from sluice.tracker.server import TrackerServer
    from sluice.tracker.service import TrackerService
    from sluice.tracker.sync_client import SyncTrackerClient
    from sluice.tracker.wal import WriteAheadLog
else:
    __getattr__ = lazy_exports(
        __name__,
        {
            "AddBlockResult": "sluice.tracker.client",
            "Cleanup": "sluice.tracker.client",
            "QueuedBlocks": "sluice.tracker.client",
            "RemoteError": "sluice.tracker.client",
            "TrackerAuthError": "sluice.tracker.client",
            "TrackerClient": "sluice.tracker.client",
            "TrackerUnavailable": "sluice.tracker.client",
            "ReceivedBlockTracker": "sluice.tracker.received_block_tracker",
            "TrackerServer": "sluice.tracker.server",
            "TrackerService": "sluice.tracker.service",
            "SyncTrackerClient": "sluice.tracker.sync_client",
            "WriteAheadLog": "sluice.tracker.wal",
        },
    )

__all__ = [
    "AddBlockResult",
    "Cleanup",
    "QueuedBlocks",
    "ReceivedBlockTracker",
    "RemoteError",
    "SyncTrackerClient",
    "TrackerAuthError",
    "TrackerClient",
    "TrackerServer",
    "TrackerService",
    "TrackerUnavailable",
    "WriteAheadLog",
]
