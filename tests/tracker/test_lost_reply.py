"""An allocation whose reply the network loses: the driver's client asks again on a new connection
and gets the same blocks, in the same form as a reply that arrived (the block RDD is built from
columns either way)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sluice.block_columns import BlockColumns
from sluice.tracker.client.tracker_client import TrackerClient
from tests.tracker.conftest import ThreadServer, make_block


class ReplyDropper:
    """A TCP proxy to the tracker that, once armed, cuts the connection on the next reply instead
    of passing it on: the request reached the tracker, its answer never reaches the client."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.armed = False
        self.dropped = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _relay(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        server_in, server_out = await asyncio.open_connection("127.0.0.1", self.port)
        upstream = asyncio.ensure_future(self._copy(client_in, server_out))
        try:
            while data := await server_in.read(65536):
                if self.armed:
                    self.armed, self.dropped = False, self.dropped + 1
                    break
                client_out.write(data)
                await client_out.drain()
        finally:
            upstream.cancel()
            client_out.close()
            server_out.close()

    @staticmethod
    async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThreadServer]:
    server = ThreadServer(tmp_path / "wal")
    yield server
    server.stop()


@pytest.fixture
async def dropper(server: ThreadServer) -> AsyncIterator[tuple[ReplyDropper, int]]:
    dropper = ReplyDropper(server.port)
    port = await dropper.start()
    yield dropper, port
    await dropper.stop()


async def test_an_allocation_whose_reply_was_lost_comes_back_as_columns(
    server: ThreadServer, dropper: tuple[ReplyDropper, int]
) -> None:
    proxy, port = dropper
    receiver = TrackerClient(server.address, "admin")  # an admin adds blocks of any id
    driver = TrackerClient(f"127.0.0.1:{port}", "driver", request_timeout=20)
    await receiver.start()
    await driver.start()
    try:
        await receiver.register_receiver(0, "r0", "host")
        for block_id in ("a", "b"):
            await receiver.add_block(make_block(block_id))
        answered = await driver.allocate_blocks(1000)  # a reply that arrives
        assert answered is not None
        await receiver.add_block(make_block("c"))

        proxy.armed = True
        lost = await driver.allocate_blocks(2000)  # allocated by the first attempt; its reply is cut
        assert proxy.dropped == 1
        assert lost is not None and isinstance(lost[0], BlockColumns)
        assert [b.block_id for b in lost[0]] == ["c"] and lost[0].num_records == [10]
        assert isinstance(answered[0], BlockColumns) and [b.block_id for b in answered[0]] == ["a", "b"]
        assert await driver.allocate_blocks(2000) is None  # the batch time was taken: nothing twice
    finally:
        await receiver.close()
        await driver.close()
