"""The client's side of the wire: :class:`ClientProtocol` (frames in and out of one asyncio
transport, every frame of a loop iteration in one write) and the decoding of the block maps the
tracker sends, which it checked when they were added.  :class:`~sluice.tracker.client.connection.
TrackerConnection` owns one protocol at a time and everything around it (reconnects, requests).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.tracker.wire.protocol import CLIENT_LIMITS, FrameDecoder, FrameTooLarge

log = logging.getLogger(__name__)


def trusted_block(w: dict) -> ReceivedBlockInfo:
    """A block map from the tracker, which checked it when it was added: skip the field checks.

    Allocation replies carry thousands of blocks; the full ``from_wire`` is several times slower.
    """
    try:
        return ReceivedBlockInfo(
            w["stream_id"],
            w["block_id"],
            w["receiver_id"],
            w["num_records"],
            w["location"],
            tuple(OffsetRange(*r) for r in w["offset_ranges"]),
            w["metadata"],
        )
    except (KeyError, TypeError):
        return ReceivedBlockInfo.from_wire(w)


def blocks_by_stream(wire: dict) -> dict[int, list[ReceivedBlockInfo]]:
    return {int(s): [trusted_block(b) for b in blocks] for s, blocks in wire.items()}


class ProtocolOwner(Protocol):
    """What :class:`ClientProtocol` tells the connection that owns it (a decoded map, the loss)."""

    def _on_message(self, msg: dict) -> None: ...
    def _on_lost(self, proto: ClientProtocol) -> None: ...


class ClientProtocol(asyncio.Protocol):
    def __init__(self, client: ProtocolOwner) -> None:
        self.client = client
        self.decoder = FrameDecoder(CLIENT_LIMITS)
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.get_running_loop().create_future()
        self._out: list[bytes] = []

    def send(self, frame: bytes) -> None:
        """Queue a frame; all frames queued in one loop iteration leave in one write (one syscall)."""
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(frame)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport), "a stream connection gives a Transport"
        self.transport = transport

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        try:
            messages = self.decoder.feed(data)
        except FrameTooLarge as exc:
            log.error("tracker sent an oversized frame: %s", exc)
            self.close()
            return
        for msg in messages:
            if isinstance(msg, dict):
                self.client._on_message(msg)
            else:
                log.warning("undecodable frame from the tracker: %s", msg.detail)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)
        self.client._on_lost(self)
