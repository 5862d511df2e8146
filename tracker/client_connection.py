"""The client's connection pieces: its errors, the frame protocol, decoding trusted blocks.

Split from :mod:`sluice.tracker.client` so that module holds only the request logic.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.tracker.protocol import CLIENT_LIMITS, FrameDecoder, FrameTooLarge

log = logging.getLogger(__name__)


class TrackerUnavailable(ConnectionError):
    """The tracker did not answer in time (or the client is closed)."""


class TrackerAuthError(PermissionError):
    """The tracker refused the hello (token or protocol version): retrying cannot help."""


class ConnectionLost(ConnectionError):
    pass


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"tracker address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def trusted_block(w: dict) -> ReceivedBlockInfo:
    """A block map from the tracker, which checked it when it was added: skip the field checks.

    Allocation replies carry thousands of blocks; the full ``from_wire`` is several times slower.
    """
    try:
        return ReceivedBlockInfo(w["stream_id"], w["block_id"], w["receiver_id"], w["num_records"], w["location"],
                                 tuple(OffsetRange(*r) for r in w["offset_ranges"]), w["metadata"])
    except (KeyError, TypeError):
        return ReceivedBlockInfo.from_wire(w)


def blocks_by_stream(wire: dict) -> dict[int, list[ReceivedBlockInfo]]:
    return {int(s): [trusted_block(b) for b in blocks] for s, blocks in wire.items()}


class ClientProtocol(asyncio.Protocol):
    def __init__(self, client: Any) -> None:
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
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            messages = self.decoder.feed(data)
        except FrameTooLarge as exc:
            log.error("tracker sent an oversized frame: %s", exc)
            assert self.transport is not None
            self.transport.close()
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
