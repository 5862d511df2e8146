"""Where blocks live between the receiver that wrote them and the Spark task that reads them.

:mod:`~sluice.storage.block_format` is the bytes of one block (CRC-checked); a
:class:`~sluice.storage.block_store.BlockStore`, named by URL, is where those bytes are kept.  The
URL's scheme chooses the store among those registered through the ``sluice_register_block_stores``
hook; this package is the ``sluice-block-stores`` built-in plugin that registers the built-in ``file``
and, through fsspec, the object stores and remote filesystems of :data:`FSSPEC_SCHEMES` (fsspec and
the protocol's package are imported only when such a store is opened).
"""

from collections.abc import Callable
from typing import Any

from sluice.hookspecs import hookimpl
from sluice.storage.block_store import (
    Block,
    BlockCorruptError,
    BlockMissingError,
    BlockStore,
    BlockStoreError,
    FileBlockStore,
    StoredBlock,
    open_block_store,
    read_block,
    store_url_of,
)
from sluice.storage.fsspec_store import FSSPEC_SCHEMES, FsspecBlockStore

__all__ = [
    "Block",
    "BlockCorruptError",
    "BlockMissingError",
    "BlockStore",
    "BlockStoreError",
    "FileBlockStore",
    "StoredBlock",
    "open_block_store",
    "read_block",
    "store_url_of",
]

STORES: dict[str, Callable[..., Any]] = {
    "file": FileBlockStore.from_url,
    **dict.fromkeys(FSSPEC_SCHEMES, FsspecBlockStore),
}


@hookimpl
def sluice_register_block_stores() -> dict[str, Callable[..., Any]]:
    """The built-in block stores, through the plugin hook."""
    return dict(STORES)
