"""``SyncTrackerClient``: the blocking face of :class:`TrackerClient`, for the PySpark driver.

The driver's job loop is ordinary synchronous Python; rather than a second protocol
implementation, it runs one :class:`TrackerClient` on a private event loop in a daemon thread and
waits on each call.  Callbacks (``on_update_rate``, ``on_stop``) run on that private loop's thread.

``close()`` from any thread ends every call still waiting, ``start()`` included, with
:class:`TrackerUnavailable`: a driver that is stopping never stays blocked on a tracker that is
not there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import TypeVar, Unpack

from sluice.block_columns import BlockColumns
from sluice.block_info import ReceivedBlockInfo
from sluice.tracker.client.connection import ClientOptions
from sluice.tracker.client.tracker_client import (
    AddBlockResult,
    Cleanup,
    QueuedBlocks,
    TrackerClient,
    TrackerUnavailable,
)

_T = TypeVar("_T")


class SyncTrackerClient:
    """Same methods as :class:`TrackerClient`, blocking; ``start()`` before use, ``close()`` after.

    :param address: the tracker's ``HOST:PORT``.
    :param role: as for :class:`TrackerClient`.
    :param kwargs: the other :class:`TrackerClient` settings (``auth_token``, ``request_timeout``, ...).
    """

    def __init__(self, address: str, role: str = "driver", **kwargs: Unpack[ClientOptions]) -> None:
        self._kwargs = kwargs
        self._address = address
        self._role = role
        self._lock = threading.Lock()  # guards _calls and the closing of the loop
        self._calls: set[concurrent.futures.Future] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sluice-tracker-client", daemon=True)
        self._thread.start()
        self._client: TrackerClient = self._run(self._make())
        self._timeout = kwargs.get("request_timeout", 10.0)

    async def _make(self) -> TrackerClient:
        return TrackerClient(self._address, self._role, **self._kwargs)

    def _run(self, coro: Coroutine[object, object, _T]) -> _T:
        with self._lock:
            if self._loop.is_closed():
                coro.close()
                raise TrackerUnavailable(f"the client of the tracker at {self._address} is closed")
            call = asyncio.run_coroutine_threadsafe(coro, self._loop)
            self._calls.add(call)
        try:
            return call.result()
        except concurrent.futures.CancelledError:
            raise TrackerUnavailable(f"the client of the tracker at {self._address} is closed") from None
        finally:
            with self._lock:
                self._calls.discard(call)

    def start(self) -> None:
        self._run(self._client.start())

    def sibling(self, address: str, **overrides: Unpack[ClientOptions]) -> SyncTrackerClient:
        """A started client of another tracker with this one's role and credentials (``overrides``
        replace settings such as ``request_timeout``)."""
        settings: ClientOptions = {**self._kwargs, **overrides}
        client = SyncTrackerClient(address, self._role, **settings)
        try:
            client.start()
        except BaseException:
            client.close()
            raise
        return client

    def stop_waiting(self) -> None:
        """See :meth:`TrackerClient.stop_waiting`: calls stop waiting for a lost connection."""
        with self._lock:
            if not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._client.stop_waiting)

    def close(self) -> None:
        """Close the connection; calls still waiting on other threads raise ``TrackerUnavailable``."""
        with self._lock:
            if self._loop.is_closed():
                return
            closing = asyncio.run_coroutine_threadsafe(self._client.close(), self._loop)
        try:
            closing.result(5)
        except Exception:  # noqa: BLE001 - closing is best effort; the loop goes below in any case
            pass
        with self._lock:
            for call in self._calls:
                call.cancel()  # the waiting threads wake now, whatever the loop still does
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            if not self._loop.is_running():
                self._loop.close()

    def __enter__(self) -> SyncTrackerClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def register_receiver(
        self, stream_id: int, receiver_id: str, host: str, block_store: str | None = None
    ) -> float | None:
        return self._run(self._client.register_receiver(stream_id, receiver_id, host, block_store))

    def incarnation(self, receiver_id: str) -> int | None:
        return self._client.incarnation(receiver_id)

    def deregister_receiver(self, receiver_id: str, reason: str = "") -> None:
        return self._run(self._client.deregister_receiver(receiver_id, reason))

    def heartbeat(
        self,
        receiver_id: str,
        lag: int | None = None,
        head_ts_ms: int | None = None,
        open_transaction_records: int | None = None,
    ) -> None:
        return self._run(self._client.heartbeat(receiver_id, lag, head_ts_ms, open_transaction_records))

    def add_block(self, info: ReceivedBlockInfo) -> AddBlockResult:
        return self._run(self._client.add_block(info))

    def allocate_blocks(
        self, batch_time_ms: int, max_records: Mapping[int, int] | None = None
    ) -> dict[int, BlockColumns] | None:
        return self._run(self._client.allocate_blocks(batch_time_ms, max_records))

    def get_blocks_of_batch(self, batch_time_ms: int) -> dict[int, list[ReceivedBlockInfo]]:
        return self._run(self._client.get_blocks_of_batch(batch_time_ms))

    def batch_completed(self, batch_info: dict, deleted_through_ms: int | None = None) -> Cleanup:
        return self._run(self._client.batch_completed(batch_info, deleted_through_ms))

    def list_blocks(
        self, stream_id: int, from_seq: int, until_seq: int | None = None, max_records: int | None = None
    ) -> QueuedBlocks:
        return self._run(self._client.list_blocks(stream_id, from_seq, until_seq, max_records))

    def commit_blocks(self, stream_id: int, until_seq: int) -> list[ReceivedBlockInfo]:
        return self._run(self._client.commit_blocks(stream_id, until_seq))

    def publish_rate(self, stream_id: int, rate: float) -> None:
        return self._run(self._client.publish_rate(stream_id, rate))

    def report_error(self, stream_id: int, receiver_id: str, message: str, error: str = "") -> None:
        return self._run(self._client.report_error(stream_id, receiver_id, message, error))

    def status(self, *, leader: bool = False) -> dict:
        return self._run(self._client.status(leader=leader))

    def call_in_loop(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the client's loop thread (for callbacks that must touch loop objects)."""
        self._loop.call_soon_threadsafe(fn)
