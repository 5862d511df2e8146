"""``ReceiverSupervisor``: one receiver's lifecycle, registration → start → heartbeats → restarts → stop.

It plays Spark's ``ReceiverSupervisor``: registers the receiver with the tracker (which may
refuse), heartbeats, applies ``update_rate`` pushes to the limiter at once, obeys ``stop``, and
restarts a failed receiver after ``restart_delay_ms`` with the error reported.  The data path
(records into blocks, blocks stored, reported and acknowledged, offsets committed) is its
:class:`~sluice.receiver.block_pusher.BlockPusher`, as Spark keeps it in ``ReceiverSupervisorImpl``.

Stop order: the receiver stops storing, the generator makes the last block and pushes everything
queued (each acknowledged, offsets committed), the receiver releases its source, deregister.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from sluice.clock import Clock, SystemClock
from sluice.receiver.block_pusher import BlockPusher, BlockSink
from sluice.receiver.metrics import ReceiverMetrics
from sluice.receiver.orphans import delete_orphans
from sluice.receiver.rate_limiter import RateLimiter
from sluice.receiver.receiver import Receiver
from sluice.settings import ReceiverSettings, with_overrides
from sluice.storage.block_store import BlockStore

log = logging.getLogger(__name__)


class Tracker(BlockSink, Protocol):
    """The part of ``sluice.tracker.client.tracker_client.TrackerClient`` a supervisor and its pusher use."""

    async def register_receiver(
        self, stream_id: int, receiver_id: str, host: str, block_store: str | None = None
    ) -> float | None: ...

    async def deregister_receiver(self, receiver_id: str, reason: str = "") -> None: ...

    async def heartbeat(
        self,
        receiver_id: str,
        lag: int | None = None,
        head_ts_ms: int | None = None,
        open_transaction_records: int | None = None,
    ) -> None: ...

    async def report_error(self, stream_id: int, receiver_id: str, message: str, error: str = "") -> None: ...


class ReceiverState(enum.Enum):
    """Spark's receiver states: a receiver stops storing as soon as it is not ``STARTED``."""

    INITIALIZED = "initialized"
    STARTED = "started"
    STOPPED = "stopped"


def _error_text(error: BaseException | None) -> str:
    if error is None:
        return ""
    return "".join(traceback.format_exception_only(type(error), error)).strip()[:2000]


class ReceiverSupervisor:
    """Runs one receiver's lifecycle: registration, start, heartbeats, rate pushes, restarts, stop.

    :param receiver: the source (a :class:`~sluice.receiver.Receiver`).
    :param tracker: the tracker client (``register_receiver``, ``heartbeat``, ``add_block``, ...).
    :param block_store: where blocks are written before they are reported.
    :param receiver_id: its id, unique among the stream's receivers.
    :param host: reported at registration.
    :param settings: the stream, the limiter's rates, the block generator's bounds, the restart
        delay and the heartbeat interval (:class:`~sluice.settings.ReceiverSettings`); default the
        schema's.
    :param clock: for the limiter, the block timer and the heartbeats (a ``ManualClock`` in tests).
    :param pusher_factory: builds the data path from :class:`BlockPusher`'s arguments (a subclass
        that observes the pushes, in benchmarks).
    :param overrides: fields of ``settings`` given one by one (``block_interval_ms=50``).
    """

    def __init__(
        self,
        receiver: Receiver,
        tracker: Tracker,
        block_store: BlockStore,
        *,
        receiver_id: str,
        host: str = "localhost",
        settings: ReceiverSettings | None = None,
        clock: Clock | None = None,
        pusher_factory: Callable[..., BlockPusher] = BlockPusher,
        **overrides: Any,
    ) -> None:
        s = with_overrides(settings or ReceiverSettings(), overrides, "ReceiverSupervisor")
        self.settings = s
        self.receiver = receiver
        self.tracker = tracker
        self.stream_id = s.stream_id
        self.receiver_id = receiver_id
        self.host = host
        self.clock: Clock = clock or SystemClock()
        self.metrics = ReceiverMetrics(s.stream_id, receiver_id)
        self.limiter = RateLimiter(rate=s.initial_rate, max_rate=s.max_rate, clock=self.clock)
        self.pusher = pusher_factory(
            receiver,
            tracker,
            block_store,
            self.limiter,
            self.metrics,
            self.report_error,
            stream_id=s.stream_id,
            receiver_id=receiver_id,
            block_interval_ms=s.block_interval_ms,
            block_lead_ms=s.block_lead_ms,
            block_queue_size=s.block_queue_size,
            max_block_records=s.max_block_records,
            max_block_bytes=s.max_block_bytes,
            clock=self.clock,
        )
        self.state = ReceiverState.INITIALIZED
        self._control: asyncio.Lock | None = None
        self._heartbeat: asyncio.Task | None = None
        self._orphan_sweeps: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        self._terminated: asyncio.Event | None = None
        self._stopping = False
        self.stopping_error: BaseException | None = None
        self.refused = False
        receiver.attach_supervisor(self)
        self.metrics.rate_limit.set(self.limiter.rate)

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the block generator, then register and start the receiver (Spark's order)."""
        self._control = asyncio.Lock()
        self._terminated = asyncio.Event()
        self.pusher.generator.start()
        self._heartbeat = asyncio.get_running_loop().create_task(
            self._heartbeats(), name=f"heartbeat-{self.receiver_id}"
        )
        await self._start_receiver()

    async def _start_receiver(self) -> None:
        assert self._control is not None
        async with self._control:
            if self._stopping:
                return
            try:
                share = await self.tracker.register_receiver(
                    self.stream_id, self.receiver_id, self.host, self.pusher.store.url
                )
            except Exception as exc:  # noqa: BLE001 - the tracker said no, or is unreachable for long
                self.refused = True
                self._background_task(
                    self.stop(f"Registered unsuccessfully: the tracker refused receiver {self.receiver_id}", exc)
                )
                return
            self.update_rate(share)
            self.state = ReceiverState.STARTED
            self._start_orphan_sweeps()
            try:
                await self.receiver.on_start()
            except Exception as exc:  # noqa: BLE001 - Spark stops here; a worker keeps trying instead
                self.request_restart(f"Error starting receiver {self.receiver_id}", exc, None)
                return
            log.info("receiver %s of stream %d started (rate %s)", self.receiver_id, self.stream_id, self.limiter.rate)

    def _start_orphan_sweeps(self) -> None:
        """After the process's first registration: delete what earlier runs of this receiver stored
        and never reported (:mod:`sluice.receiver.orphans`), now and every ``orphan_grace_ms``."""
        grace_ms, first = self.settings.orphan_grace_ms, self.tracker.incarnation(self.receiver_id)
        if self._orphan_sweeps is None and grace_ms is not None and first is not None:
            self._orphan_sweeps = self._background_task(self._sweep_orphans(first, grace_ms))

    async def _sweep_orphans(self, first_incarnation: int, grace_ms: float) -> None:
        store, rid = self.pusher.store, self.receiver_id
        while True:
            try:
                if (
                    await delete_orphans(store, self.tracker, self.stream_id, rid, first_incarnation, grace_ms / 1000)
                    is None
                ):
                    log.info(
                        "receiver %s: no orphan sweeps (the store cannot list, or the tracker has no known_blocks)",
                        rid,
                    )
                    return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a leftover file costs space, never records
                log.warning("receiver %s: looking for orphaned block files failed: %s", rid, exc)
            await self.clock.sleep(grace_ms)

    async def _stop_receiver(self, message: str, error: BaseException | None) -> None:
        """Stop storing, push what is held (offsets committed), release the source, deregister."""
        if self.state != ReceiverState.STARTED:
            return
        self.state = ReceiverState.STOPPED
        try:
            await self.receiver.on_stop()
        except Exception as exc:  # noqa: BLE001
            log.warning("receiver %s on_stop failed: %s", self.receiver_id, exc)
        await self.receiver.cancel_tasks()
        await self.pusher.flush()
        try:
            await self.receiver.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("receiver %s close failed: %s", self.receiver_id, exc)
        try:
            await self.tracker.deregister_receiver(
                self.receiver_id, (message + (f": {_error_text(error)}" if error else ""))[:2000]
            )
        except Exception as exc:  # noqa: BLE001 - the tracker also notices silence
            log.warning("deregistering %s failed: %s", self.receiver_id, exc)

    def request_restart(self, message: str, error: BaseException | None, delay_ms: float | None) -> None:
        if self._stopping:
            return
        self._background_task(self.restart_receiver(message, error, delay_ms))

    async def restart_receiver(
        self, message: str, error: BaseException | None = None, delay_ms: float | None = None
    ) -> None:
        """Spark's ``restartReceiver``: report, stop the receiver, wait, start it again."""
        assert self._control is not None
        delay = self.settings.restart_delay_ms if delay_ms is None else delay_ms
        log.warning("restarting receiver %s in %.0f ms: %s %s", self.receiver_id, delay, message, _error_text(error))
        self.metrics.restarts.inc()
        self.report_error(message, error)
        async with self._control:
            await self._stop_receiver(message, error)
        await self.clock.sleep(delay)
        await self._start_receiver()

    def request_stop(self, message: str, error: BaseException | None = None) -> None:
        self._background_task(self.stop(message, error))

    async def stop(self, message: str = "stopped", error: BaseException | None = None) -> None:
        """Stop for good: receiver, then the generator (last block pushed and acknowledged)."""
        if self._control is None:  # never started: nothing to push
            self._stopping = True
            return
        if self._stopping:
            if self._terminated is not None:
                await self._terminated.wait()
            return
        self._stopping = True
        self.stopping_error = error
        log.info("stopping receiver %s: %s", self.receiver_id, message)
        assert self._control is not None and self._terminated is not None
        async with self._control:
            await self._stop_receiver(message, error)
        await self.pusher.generator.stop()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        for task in list(self._background):
            if task is not asyncio.current_task():
                task.cancel()
        self._terminated.set()

    async def abandon(self) -> None:
        """After a stop ran out of time: drop every held block and release the source.

        Nothing held is acknowledged, so nothing of it is committed: a Kafka source reads it again.
        """
        self._stopping = True
        self.state = ReceiverState.STOPPED
        self.pusher.generator.abort()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        for task in list(self._background):
            task.cancel()
        await self.receiver.cancel_tasks()
        try:
            await self.receiver.close()
        except Exception as exc:  # noqa: BLE001 - the process is going away regardless
            log.warning("receiver %s close failed: %s", self.receiver_id, exc)
        if self._terminated is not None:
            self._terminated.set()

    async def await_termination(self) -> None:
        assert self._terminated is not None
        await self._terminated.wait()
        if self.stopping_error is not None:
            raise self.stopping_error

    def is_receiver_started(self) -> bool:
        return self.state == ReceiverState.STARTED

    def is_receiver_stopped(self) -> bool:
        return self.state == ReceiverState.STOPPED

    def _background_task(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- tracker pushes ---------------------------------------------------------------------------
    def update_rate(self, rate: float | None) -> None:
        """Apply the tracker's share at once; <= 0 or None is ignored (Spark's ``updateRate``)."""
        if rate is None:
            return
        self.limiter.set_rate(rate)
        self.metrics.rate_limit.set(self.limiter.rate)

    async def _heartbeats(self) -> None:
        while True:
            await self.clock.sleep(self.settings.heartbeat_interval_ms)
            try:
                lag = self.receiver.lag()
                head = self.receiver.head_timestamp_ms() if lag else None
                held = self.receiver.open_transaction_records()
                await self.tracker.heartbeat(self.receiver_id, lag, head, held)
            except asyncio.CancelledError:
                raise
            except ConnectionError as exc:  # an outage: the tracker client says so, at a bounded rate
                log.debug("heartbeat of %s failed: %s", self.receiver_id, exc)
            except Exception as exc:  # noqa: BLE001 - next one may get through
                log.warning("heartbeat of %s failed: %s", self.receiver_id, exc)

    def report_error(self, message: str, error: BaseException | None = None) -> None:
        """Log, count and tell the tracker (fire and forget: reporting must not block receiving)."""
        log.warning("receiver %s: %s %s", self.receiver_id, message, _error_text(error))

        async def send() -> None:
            try:
                await self.tracker.report_error(self.stream_id, self.receiver_id, message[:2000], _error_text(error))
            except Exception as exc:  # noqa: BLE001
                log.debug("report_error to the tracker failed: %s", exc)

        self._background_task(send())
