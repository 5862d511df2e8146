"""Group commit: every event logged while an fsync is running shares the next fsync.

The state machines call :meth:`GroupCommit.write` (an :class:`~sluice.tracker.log.events.EventLog`): it only
encodes and buffers, so the state change it precedes happens at once on the event loop.  One
writer task hands each accumulated buffer to a thread that writes and fsyncs it, so the loop keeps
reading requests meanwhile; those requests form the next group.  The server sends a reply only
once ``durable`` has reached the sequence number the request saw (no reply before durability).

If a write or fsync fails the in-memory state is ahead of the disk and cannot be trusted (an fsync
error may have dropped dirty pages): the log turns failed, every later write raises, and the
service stops with an error; a restart recovers from what is durable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from sluice.errors import SluiceError
from sluice.tracker.log.events import Event
from sluice.tracker.log.metrics import WAL_GROUP_EVENTS
from sluice.tracker.log.wal import encode_record

log = logging.getLogger(__name__)


class CommitLog(Protocol):
    """What a group is written to: the local :class:`~sluice.tracker.log.wal.WriteAheadLog` or a shared
    :class:`~sluice.tracker.log.object_log.ObjectLog`."""

    @property
    def segment(self) -> Path | str: ...  # the segment file or object written next, named in errors

    def write_bytes(self, data: bytes) -> None: ...
    def should_roll(self) -> bool: ...
    def roll(self, snapshot: object) -> None: ...
    def close(self) -> None: ...


class WALFailed(SluiceError, RuntimeError):
    """The write-ahead log failed; the tracker must stop."""


class GroupCommit:
    """Buffers events, commits them in groups from one writer task, tracks durability.

    :param wal: the log the groups are written to.
    :param snapshot: returns the live state when the log rolls to a new segment.
    """

    def __init__(self, wal: CommitLog, snapshot: Callable[[], object]) -> None:
        self.wal = wal
        self._snapshot = snapshot
        self._on_durable: Callable[[], None] = lambda: None
        self._on_failure: Callable[[BaseException], None] = lambda exc: None
        self._buf: list[bytes] = []
        self.appended = 0  # events written so far
        self.durable = 0  # events known to be on disk
        self.failed: BaseException | None = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False
        self._task: asyncio.Task | None = None

    def start(
        self,
        on_durable: Callable[[], None] = lambda: None,
        on_failure: Callable[[BaseException], None] = lambda exc: None,
    ) -> None:
        """Start the writer task; ``on_durable`` runs after each group is on disk, ``on_failure``
        once if the log fails (the server sends waiting replies, or stops)."""
        self._on_durable, self._on_failure = on_durable, on_failure
        self._task = asyncio.get_running_loop().create_task(self._run(), name="wal-group-commit")

    def write(self, event: Event) -> None:
        if self.failed is not None:
            raise WALFailed(f"the write-ahead log failed earlier: {self.failed}")
        if self._closing:
            raise WALFailed("the write-ahead log is closing")
        self._buf.append(encode_record(event.to_wire()))
        self.appended += 1
        self._idle.clear()
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._buf:
                if self._closing:
                    return
                continue
            data, upto, count = b"".join(self._buf), self.appended, len(self._buf)
            self._buf = []
            snapshot = self._snapshot() if self.wal.should_roll() else None
            try:
                await loop.run_in_executor(None, self._commit, data, snapshot)
            except BaseException as exc:  # noqa: BLE001 - the disk refused: nothing after this can be trusted
                self.failed = exc
                log.error("write-ahead log write failed at %s: %s", self.wal.segment, exc)
                self._idle.set()
                self._on_failure(exc)
                return
            WAL_GROUP_EVENTS.observe(count)
            self.durable = upto
            if not self._buf:
                self._idle.set()
            self._on_durable()

    def _commit(self, data: bytes, snapshot: object) -> None:
        self.wal.write_bytes(data)
        if snapshot is not None:
            self.wal.roll(snapshot)

    async def flush(self) -> None:
        """Wait until everything written so far is durable (or the log failed)."""
        while self.durable < self.appended and self.failed is None:
            self._wake.set()
            await self._idle.wait()

    async def close(self) -> None:
        """Flush, stop the writer and close the files."""
        await self.flush()
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        self.wal.close()
