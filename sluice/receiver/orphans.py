"""Deleting the block files an earlier run of a receiver stored and never reported.

A receiver writes a block to the store, then reports it to the tracker.  One that dies in between
(killed, its host lost) leaves a file no batch reads and no driver deletes: the tracker never heard
of it.  Spark bounds its receivers' write-ahead log by age (``cleanupOldBlocks(threshTime)``), not by
reference; a Sluice receiver uses both.  At its start and then every ``receiver.orphan_grace_ms`` it
lists its own ids in the store and deletes a file only when

* its id is of a registration earlier than this process's first (the tracker hands out incarnations
  in increasing order, so this process never formed it),
* the tracker does not hold it (``known_blocks``: neither queued nor in a batch not yet cleaned
  up), and
* it was last written ``orphan_grace_ms`` ago or more: a process of an earlier registration that is
  still alive (paused, cut off) rewrites its file before each retry of the report, so a file that old
  is one nobody retries.

:func:`orphans` is the rule, pure; :func:`delete_orphans` asks the store and the tracker.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterable
from typing import Any

from sluice.block_info import block_id_prefix
from sluice.storage.block_store import StoredBlock
from sluice.tracker.wire.protocol import E_UNKNOWN_OP, RemoteError

log = logging.getLogger(__name__)

#: What follows a receiver's prefix in the ids it reports: ``<incarnation>-<interval start ms>``,
#: then ``-f<n>`` for a block a flush cut early.  Anything else (another receiver whose id extends
#: this one's, an id of a version without incarnations) is never taken for this receiver's.
_OWN_ID = re.compile(r"^(\d+)-\d+(?:-f\d+)?$")


def orphans(
    stored: Iterable[StoredBlock],
    stream_id: int,
    receiver_id: str,
    first_incarnation: int,
    now_s: float,
    grace_s: float,
) -> list[StoredBlock]:
    """The files that may be orphans, before the tracker is asked: the receiver's own ids of a
    registration before ``first_incarnation``, last written ``grace_s`` or more before ``now_s``."""
    prefix = block_id_prefix(stream_id, receiver_id)
    found = []
    for block in stored:
        own = _OWN_ID.match(block.block_id.removeprefix(prefix)) if block.block_id.startswith(prefix) else None
        if own and int(own.group(1)) < first_incarnation and block.modified <= now_s - grace_s:
            found.append(block)
    return found


async def delete_orphans(
    store: Any, tracker: Any, stream_id: int, receiver_id: str, first_incarnation: int, grace_s: float
) -> int | None:
    """Delete the receiver's orphaned block files (the module's rule); how many, or ``None`` when the
    store cannot list (``stored_blocks``) or the tracker cannot answer ``known_blocks``."""
    list_blocks = getattr(store, "stored_blocks", None)
    if list_blocks is None or not hasattr(tracker, "known_blocks"):
        return None
    stored = await asyncio.to_thread(list_blocks, stream_id, block_id_prefix(stream_id, receiver_id))
    candidates = orphans(stored, stream_id, receiver_id, first_incarnation, time.time(), grace_s)
    if not candidates:
        return 0
    try:
        known = await tracker.known_blocks(stream_id, receiver_id, [b.block_id for b in candidates])
    except RemoteError as exc:
        if exc.code == E_UNKNOWN_OP:  # a tracker of before the op: it cannot say, so nothing goes
            return None
        raise
    gone = [b for b in candidates if b.block_id not in known]
    for block in gone:
        await asyncio.to_thread(store.delete, block.location)
    if gone:
        log.warning(
            "receiver %s: deleted %d block file(s) an earlier run stored and never reported (%s%s)",
            receiver_id,
            len(gone),
            ", ".join(b.block_id for b in gone[:3]),
            " ..." if len(gone) > 3 else "",
        )
    return len(gone)
