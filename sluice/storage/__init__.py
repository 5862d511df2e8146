"""Where blocks live between the receiver that wrote them and the Spark task that reads them.

:mod:`~sluice.storage.block_format` is the bytes of one block (CRC-checked); a
:class:`~sluice.storage.block_store.BlockStore`, named by URL, is where those bytes are kept.
"""

from sluice.storage.block_store import (
                                        Block,
                                        BlockCorruptError,
                                        BlockMissingError,
                                        BlockStore,
                                        BlockStoreError,
                                        FileBlockStore,
                                        open_block_store,
                                        read_block,
)

__all__ = ["Block", "BlockCorruptError", "BlockMissingError", "BlockStore", "BlockStoreError", "FileBlockStore",
           "open_block_store", "read_block"]
