"""Receiver workers: rate limiter, block generator, block store, supervisor and sources.

Light imports only here: PySpark workers import ``receiver.block_store`` to read blocks and must
not pull in aiokafka or the tracker client.  The supervisor and the sources load on first use.
"""

from __future__ import annotations

from typing import Any

from receiver.block_generator import BlockGenerator, BlockGeneratorError, GeneratorState
from receiver.block_store import (Block, BlockCorruptError, BlockMissingError, BlockStore, BlockStoreError,
                                  FileBlockStore, open_block_store)
from receiver.clock import ManualClock, SystemClock
from receiver.rate_limiter import RateLimiter
from receiver.records import Record

_LAZY = {
    "Receiver": "receiver.receiver",
    "ReceiverSupervisor": "receiver.supervisor",
    "KafkaReceiver": "receiver.sources.kafka",
    "SocketReceiver": "receiver.sources.socket",
    "GeneratorReceiver": "receiver.sources.generator",
}

__all__ = ["Block", "BlockCorruptError", "BlockGenerator", "BlockGeneratorError", "BlockMissingError",
           "BlockStore", "BlockStoreError", "FileBlockStore", "GeneratorState", "ManualClock", "RateLimiter",
           "Record", "SystemClock", "open_block_store", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'receiver' has no attribute {name!r}")
