"""Fixtures of the tracker tests: block factories, a tracker process, an in-process server thread."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from sluice import embedded
from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.embedded import free_port, stop_process
from sluice.tracker.wire.protocol import PROTOCOL_VERSION

BLOCKS = "file:///blocks"  # the store the blocks of these tests name (never read: the tracker checks names only)


def make_block(
    block_id: str, stream: int = 0, records: int = 10, ranges: tuple = (), receiver: str = "r0"
) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(
        stream,
        block_id,
        receiver,
        records,
        f"{BLOCKS}/stream-{stream}/{block_id}.blk",
        tuple(OffsetRange(*r) for r in ranges),
    )


def start_tracker(wal_dir: Path, port: int, log: Path, *extra: str) -> Any:
    """A real ``sluice-tracker`` process (its module entry point) listening on ``port``."""
    return embedded.start_tracker(wal_dir, port=port, log=log, args=extra, block_store=BLOCKS).proc


@pytest.fixture
def tracker_process(tmp_path: Path) -> Iterator[tuple[Any, str]]:
    port = free_port()
    proc = start_tracker(tmp_path / "wal", port, tmp_path / "tracker.log")
    yield proc, f"127.0.0.1:{port}"
    stop_process(proc)


class ThreadServer:
    """A TrackerServer on its own event loop in a daemon thread, for tests that speak raw sockets."""

    def __init__(self, wal_dir: Path | None, open_kwargs: dict | None = None, **server_kwargs: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = self.call(self._start(wal_dir, open_kwargs or {}, server_kwargs))
        self.port = self.server.port
        self.address = f"127.0.0.1:{self.port}"

    async def _start(self, wal_dir: Path | None, open_kwargs: dict, kwargs: dict) -> Any:
        from sluice.tracker.server.recovery import open_service
        from sluice.tracker.server.server import TrackerServer

        service, commit = open_service(wal_dir, **open_kwargs)
        server = TrackerServer(service, commit, **kwargs)
        await server.start("127.0.0.1", 0)
        return server

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def stop(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class RawPeer:
    """A blocking socket speaking frames, to send what no real client would."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, message: Any) -> None:
        payload = msgpack.packb(message)
        self.send_raw(struct.pack(">I", len(payload)) + payload)

    def recv(self) -> dict | None:
        """The next frame, or None at EOF."""
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">I", self.buf[:4])
                if len(self.buf) >= 4 + n:
                    frame, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
                    return msgpack.unpackb(frame, strict_map_key=False)
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk

    def hello(self, role: str = "admin", token: str | None = None) -> dict | None:
        self.send({"op": "hello", "id": 0, "version": PROTOCOL_VERSION, "role": role, "token": token})
        return self.recv()

    def close(self) -> None:
        self.sock.close()
