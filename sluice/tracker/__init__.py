"""Sluice tracker: ReceivedBlockTracker, receiver registry, write-ahead log, msgpack RPC (``sluice-tracker``).

Imports are lazy (:mod:`sluice._exports`) so that a receiver or a driver importing the client does
not load the server.  ``__all__`` is the supported API: the clients and what their calls return or
raise, and the server's parts for embedding a tracker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._exports import lazy_exports

if TYPE_CHECKING:
    from sluice.tracker.client.sync_client import SyncTrackerClient
    from sluice.tracker.client.tracker_client import (
        AddBlockResult,
        Cleanup,
        QueuedBlocks,
        RemoteError,
        TrackerAuthError,
        TrackerClient,
        TrackerUnavailable,
    )
    from sluice.tracker.log.wal import WriteAheadLog
    from sluice.tracker.server.received_block_tracker import ReceivedBlockTracker
    from sluice.tracker.server.server import TrackerServer
    from sluice.tracker.server.service import TrackerService
else:
    __getattr__ = lazy_exports(
        __name__,
        {
            "AddBlockResult": "sluice.tracker.client.tracker_client",
            "Cleanup": "sluice.tracker.client.tracker_client",
            "QueuedBlocks": "sluice.tracker.client.tracker_client",
            "RemoteError": "sluice.tracker.client.tracker_client",
            "TrackerAuthError": "sluice.tracker.client.tracker_client",
            "TrackerClient": "sluice.tracker.client.tracker_client",
            "TrackerUnavailable": "sluice.tracker.client.tracker_client",
            "ReceivedBlockTracker": "sluice.tracker.server.received_block_tracker",
            "TrackerServer": "sluice.tracker.server.server",
            "TrackerService": "sluice.tracker.server.service",
            "SyncTrackerClient": "sluice.tracker.client.sync_client",
            "WriteAheadLog": "sluice.tracker.log.wal",
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
