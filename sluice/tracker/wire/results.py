"""Results the tracker's operations return, as both sides hold them.

The server builds them and the client hands them to receivers, so they live on the wire's floor:
a client that imported them from the server would load the server's state machines and metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.block_info import ReceivedBlockInfo

__all__ = ["AddBlockResult"]


@dataclass(frozen=True, slots=True)
class AddBlockResult:
    """``accepted=False``: every offset was added before; the block was dropped as a duplicate.

    :param accepted: ``False`` when the block was a duplicate and dropped.
    :param info: the block as recorded (trimmed to its new offsets), or ``None`` when dropped.
    """

    accepted: bool
    info: ReceivedBlockInfo | None
