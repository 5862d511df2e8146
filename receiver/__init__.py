"""Receiver workers: rate limiter, block generator, supervisor and sources (``sluice-receiver``).

Light imports only here: the supervisor and the sources (which need aiokafka and the tracker
client) load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from sluice.receiver.block_generator import BlockGenerator, BlockGeneratorError, GeneratorState
from sluice.receiver.rate_limiter import RateLimiter

_LAZY = {
    "Receiver": "sluice.receiver.receiver",
    "ReceiverSupervisor": "sluice.receiver.supervisor",
    "KafkaReceiver": "sluice.receiver.sources.kafka",
    "SocketReceiver": "sluice.receiver.sources.socket",
    "GeneratorReceiver": "sluice.receiver.sources.generator",
}

__all__ = ["BlockGenerator", "BlockGeneratorError", "GeneratorState", "RateLimiter", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
