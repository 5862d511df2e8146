"""Receiver workers: rate limiter, block generator, supervisor and sources (``sluice-receiver``).

Light imports only here: the supervisor and the sources (which need aiokafka and the tracker
client) load on first use (:mod:`sluice._exports`).  ``__all__`` is the supported API: a custom
source subclasses :class:`Receiver`; the rest runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._exports import lazy_exports
from sluice.receiver.block_generator import BlockGenerator, BlockGeneratorError, GeneratorState
from sluice.receiver.rate_limiter import RateLimiter

if TYPE_CHECKING:
    from sluice.receiver.receiver import Receiver
    from sluice.receiver.sources.generator import GeneratorReceiver
    from sluice.receiver.sources.kafka import KafkaReceiver
    from sluice.receiver.sources.socket import SocketReceiver
    from sluice.receiver.supervisor import ReceiverSupervisor
else:
    __getattr__ = lazy_exports(
        __name__,
        {
            "Receiver": "sluice.receiver.receiver",
            "ReceiverSupervisor": "sluice.receiver.supervisor",
            "KafkaReceiver": "sluice.receiver.sources.kafka",
            "SocketReceiver": "sluice.receiver.sources.socket",
            "GeneratorReceiver": "sluice.receiver.sources.generator",
        },
    )

__all__ = [
    "BlockGenerator",
    "BlockGeneratorError",
    "GeneratorReceiver",
    "GeneratorState",
    "KafkaReceiver",
    "RateLimiter",
    "Receiver",
    "ReceiverSupervisor",
    "SocketReceiver",
]
