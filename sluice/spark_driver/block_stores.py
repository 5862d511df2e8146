"""The driver's side of the block stores, shared by receiver mode and the ``sluice`` source.

What opens a store in a task, which block locations the driver refuses to read or delete (outside
the configured store, or not a block's shape: the tracker's answers are network input), and the
deletion of finished blocks, which falls to the driver because it is the last reader (Spark's
``cleanupOldBlocksAndBatches``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from sluice.block_info import ReceivedBlockInfo
from sluice.spark_driver.metrics import BLOCKS_REFUSED
from sluice.storage.block_store import BlockStoreError, LocationRefused, check_location, open_block_store, store_url_of
from sluice.storage.fsspec_store import task_options

log = logging.getLogger(__name__)


def store_options(url: str, block_store_options: Mapping[str, Any]) -> dict[str, Any]:
    """What opens the store of ``url`` in a task: nothing for ``file://``; for an object store the
    ``[block_store.options]`` table plus what :func:`~sluice.storage.fsspec_store.task_options` adds."""
    if urlsplit(url).scheme == "file":
        return {}

    return task_options(url, block_store_options)


def refusal(location: str, stream_id: int, block_id: str, block_store: str | None) -> str | None:
    """Why a block's location is refused (outside ``block_store``, not a block's shape), or None."""
    try:
        check_location(location, stream_id, block_id, (block_store,) if block_store else ())
    except LocationRefused as exc:
        return str(exc)
    return None


def delete_blocks(
    blocks: list[ReceivedBlockInfo], block_store: str | None, store_options: Callable[[str], dict[str, Any]]
) -> bool:
    """Delete finished blocks from their stores (``block_store``, else the one each location names):
    one bulk delete per store where the store has one.  A failure is logged, never raised (an
    orphaned block wastes space, a failed batch would read everything again); False when a store
    failed, so the caller can try again.  A location that is refused, or names no store, is never
    deleted: logged and counted, and not a failure to try again."""
    if not blocks:
        return True

    by_store: dict[str, list[ReceivedBlockInfo]] = {}
    for info in blocks:
        why = refusal(info.location, info.stream_id, info.block_id, block_store)
        if why is not None:  # never delete what is not a block of the store
            BLOCKS_REFUSED.labels("delete").inc()
            log.error("block %s is not deleted: %s", info.block_id, why)
            continue
        try:
            by_store.setdefault(block_store or store_url_of(info.location), []).append(info)
        except BlockStoreError as exc:
            log.warning("block %s could not be deleted: %s", info.block_id, exc)
    deleted = True
    for url, infos in by_store.items():
        locations = [info.location for info in infos]
        try:
            store = open_block_store(url, store_options(url))
            delete_many = getattr(store, "delete_many", None)
            if delete_many is not None:
                delete_many(locations)
            else:
                for location in locations:
                    try:
                        store.delete(location)
                    except LocationRefused as exc:  # not a block file (a directory, say): never deleted
                        BLOCKS_REFUSED.labels("delete").inc()
                        log.error("%s", exc)
        except BlockStoreError as exc:
            log.warning("%d block(s) could not be deleted from %s: %s", len(locations), url, exc)
            deleted = False
    return deleted
