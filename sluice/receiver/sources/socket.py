"""``SocketReceiver``: newline-delimited UTF-8 text from a TCP server (Spark's ``socketTextStream``).

Lines read in one network read are stored together (one ``store_many``), so the per-line cost is
a split and a decode.  Like Spark's socket receiver, it restarts (after ``restart_delay_ms``)
when the server closes the connection or cannot be reached.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from sluice.errors import SluiceError
from sluice.receiver.receiver import Receiver

log = logging.getLogger(__name__)


class SourceClosed(SluiceError, ConnectionError):
    """The server closed the connection; the receiver restarts after ``restart_delay_ms``."""

    retriable = True


class SocketReceiver(Receiver):
    """Lines of text from a TCP server, one record each (Spark's ``socketTextStream``).

    :param host: the server to connect to.
    :param port: its port.
    :param encoding: how the bytes of a line are decoded (undecodable bytes are replaced).
    :param read_size: the most bytes read at once; the lines of one read are stored together.
    :param max_line_bytes: a line longer than this is stored in pieces (memory stays bounded).
    """

    def __init__(
        self, host: str, port: int, *, encoding: str = "utf-8", read_size: int = 1 << 16, max_line_bytes: int = 1 << 20
    ) -> None:
        super().__init__()
        self.host = host
        self.port = port
        self.encoding = encoding
        self.read_size = read_size
        self.max_line_bytes = max_line_bytes
        self._writer: asyncio.StreamWriter | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SocketReceiver:
        """The ``socket`` source's factory: the receiver the ``[socket]`` section describes."""
        return cls(options["host"], options["port"])

    async def on_start(self) -> None:
        reader, self._writer = await asyncio.open_connection(self.host, self.port)
        log.info("receiver %s connected to %s:%d", self.receiver_id, self.host, self.port)
        self.spawn(self._receive(reader), name=f"socket-{self.receiver_id}")

    async def on_stop(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    async def _receive(self, reader: asyncio.StreamReader) -> None:
        pending = b""
        while True:
            chunk = await reader.read(self.read_size)
            if not chunk:
                if pending:
                    await self.store_many([pending.decode(self.encoding, "replace")])
                raise SourceClosed(f"socket data stream from {self.host}:{self.port} had no more data")
            data = pending + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) > self.max_line_bytes:  # one endless line must not grow without bound
                    await self.store_many([data.decode(self.encoding, "replace")])
                    data = b""
                pending = data
                continue
            pending = data[cut + 1 :]
            lines = data[:cut].decode(self.encoding, "replace").split("\n")
            await self.store_many([line.removesuffix("\r") for line in lines])
