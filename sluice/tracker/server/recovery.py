"""A tracker service recovered from its local write-ahead log, with group commit attached.

The standby's path, which reads a shared log on an object store instead, is
:mod:`sluice.tracker.server.standby`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from sluice.clock import Clock
from sluice.settings import TrackerSettings, with_overrides
from sluice.tracker.log.group_commit import GroupCommit
from sluice.tracker.log.wal import WriteAheadLog
from sluice.tracker.server.service import TrackerService

log = logging.getLogger(__name__)


def open_service(
    wal_dir: str | Path | None,
    *,
    settings: TrackerSettings | None = None,
    fsync: bool = True,
    clock: Clock | None = None,
    block_stores: Sequence[str] = (),
    **overrides: object,
) -> tuple[TrackerService, GroupCommit | None]:
    """Recover a service from ``wal_dir`` (None: no log, in memory) and attach group commit.

    ``settings`` (default the schema's), with ``overrides`` of its fields given one by one, shape
    the service and the log's segments.  Must run inside the event loop (GroupCommit binds asyncio
    events to it).
    """
    s = with_overrides(settings or TrackerSettings(), overrides, "open_service")
    service = TrackerService(settings=s, clock=clock, block_stores=block_stores)
    if wal_dir is None:
        return service, None
    wal = WriteAheadLog(
        wal_dir,
        segment_bytes=s.wal_segment_bytes,
        segment_ms=s.wal_segment_ms,
        piece_bytes=s.wal_piece_bytes,
        fsync=fsync,
    )
    recovered = wal.recover()
    service.recover(recovered.snapshot, recovered.events)
    log.info(
        "recovered from %s: %d events after %s; %s",
        wal_dir,
        len(recovered.events),
        "a snapshot" if recovered.snapshot is not None else "no snapshot",
        service.tracker.describe(),
    )
    commit = GroupCommit(wal, service.snapshot)
    service.set_log(commit)
    return service, commit
