"""A receiver worker process: one tracker connection, several receivers as asyncio tasks.

The worker owns the ``TrackerClient`` (one connection, pushes routed to the supervisor they name)
and the block store, builds the receivers the configuration asks for, and stops them all
gracefully on request: each receiver's last block is pushed and acknowledged and its offsets
committed before the worker returns.  A stop is bounded by ``receiver.stop_timeout_ms``: past it,
whatever the tracker does (gone, paused, refusing), the blocks it has not acknowledged are
abandoned, their offsets stay uncommitted (the source reads them again), and the log says how many.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

from sluice.config import Config, ConfigError, read_token
from sluice.plugins import PluginError, registry
from sluice.receiver.receiver import Receiver
from sluice.receiver.supervisor import ReceiverSupervisor, Tracker
from sluice.settings import ReceiverSettings
from sluice.storage.block_store import BlockStore, open_block_store
from sluice.tracker.client.tracker_client import TrackerClient
from sluice.tracker.wire.tls import client_context

log = logging.getLogger(__name__)


def default_receiver_prefix() -> str:
    return f"{socket.gethostname().split('.')[0]}-{os.getpid()}"


def make_receiver(config: Config, index: int) -> Receiver:
    """The receiver ``receiver.source`` names, built by its registered factory.

    A built-in source gets its own section (``[kafka]``, ``[socket]``, ``[generator]``); a plugin's
    gets the ``[receiver.source_options]`` table.
    """
    name = config["receiver.source"]
    registration = registry("sluice_register_sources").lookup(name)
    options = config.section(name) if registration.builtin else dict(config["receiver.source_options"])
    try:
        receiver = registration.factory(options)
    except ValueError as exc:  # the factory's word on a bad option: a configuration error
        raise ConfigError(f"receiver.source = {name!r}: {exc}") from None
    except Exception as exc:
        raise PluginError(
            f"source {name!r} of {registration.describe()} could not be built: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(receiver, Receiver):
        raise PluginError(
            f"source {name!r} of {registration.describe()} built {receiver!r}, which is not a sluice.receiver.Receiver"
        )
    return receiver


class ReceiverWorker:
    """A ``sluice-receiver`` process: one tracker connection, ``receiver.receivers`` supervisors.

    :param config: the resolved configuration (``receiver`` and the source sections).
    :param tracker_factory: builds the tracker client from its push callbacks (tests pass a fake);
        default a :class:`~sluice.tracker.client.tracker_client.TrackerClient` to ``receiver.tracker``.
    :param block_store: the store to write to; default the one ``receiver.block_store`` names.
    :param receiver_factory: builds receiver ``index`` from the configuration; default
        :func:`make_receiver` (the registered source ``receiver.source`` names).
    """

    def __init__(
        self,
        config: Config,
        *,
        tracker_factory: Callable[..., Any] | None = None,
        block_store: BlockStore | None = None,
        receiver_factory: Callable[[Config, int], Receiver] = make_receiver,
    ) -> None:
        self.config = config
        self.prefix = config["receiver.receiver_id"] or default_receiver_prefix()
        self.host = socket.gethostname()
        self.supervisors: dict[str, ReceiverSupervisor] = {}
        self._tracker_factory = tracker_factory
        self._store = block_store
        self._receiver_factory = receiver_factory
        self.tracker: Any = None
        self.abandoned_blocks: int | None = None  # set when a stop timed out

    # tracker pushes, routed by receiver id
    def _on_update_rate(self, stream_id: int, receiver_id: str, rate: float) -> None:
        supervisor = self.supervisors.get(receiver_id)
        if supervisor is not None:
            supervisor.update_rate(rate)

    def _on_stop(self, receiver_id: str, reason: str) -> None:
        supervisor = self.supervisors.get(receiver_id)
        if supervisor is not None:
            supervisor.request_stop(f"Stopped by the tracker: {reason}")

    def _make_tracker(self) -> Tracker:
        if self._tracker_factory is not None:
            return self._tracker_factory(on_update_rate=self._on_update_rate, on_stop=self._on_stop)

        c = self.config
        return TrackerClient(
            c["receiver.tracker"],
            "receiver",
            auth_token=read_token(c["receiver.auth_token_file"]),
            ssl=client_context("receiver", c["receiver.tls_ca"], c["receiver.tls_cert"], c["receiver.tls_key"]),
            on_update_rate=self._on_update_rate,
            on_stop=self._on_stop,
        )

    async def start(self) -> None:
        c = self.config
        if c["receiver.source"] == "kafka" and c["kafka.static_membership"] and not c["receiver.receiver_id"]:
            # the default id holds the process id: each restart would add a member that holds its
            # partitions, unread, until its session times out
            raise ConfigError(
                "kafka.static_membership needs receiver.receiver_id: a static member's id must stay the same "
                "across restarts"
            )
        # sources and the store first: a bad option stops the worker before it connects anywhere
        receivers = [self._receiver_factory(c, index) for index in range(c["receiver.receivers"])]
        store = self._store or open_block_store(c["receiver.block_store"], c["block_store.options"])
        check = getattr(store, "check", None)  # an object store's bucket must exist (FsspecBlockStore)
        if check is not None:
            await asyncio.to_thread(check)
        self.tracker = self._make_tracker()
        await self.tracker.start()
        settings = ReceiverSettings.from_config(c)
        for index, receiver in enumerate(receivers):
            receiver_id = f"{self.prefix}-{index}"
            self.supervisors[receiver_id] = ReceiverSupervisor(
                receiver, self.tracker, store, receiver_id=receiver_id, host=self.host, settings=settings
            )
        await asyncio.gather(*(s.start() for s in self.supervisors.values()))

    async def wait(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set or every receiver has terminated (e.g. stopped by the tracker)."""
        stopper = asyncio.ensure_future(stop.wait())
        ended = {asyncio.ensure_future(s.await_termination()) for s in self.supervisors.values()}
        pending = {stopper, *ended}
        try:
            while stopper in pending and ended & pending:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            # a receiver that stopped on an error ends its wait with it: the supervisor keeps it as
            # ``stopping_error`` for the exit status, so it is taken here, not left to asyncio's
            # "exception was never retrieved" traceback
            for task in ended - pending:
                if not task.cancelled():
                    task.exception()

    async def stop(self, message: str = "worker stopping") -> None:
        """Stop every receiver gracefully within ``receiver.stop_timeout_ms``, else abandon the rest."""
        supervisors = list(self.supervisors.values())
        budget_s = self.config["receiver.stop_timeout_ms"] / 1000
        # what is left after the graceful part (closing sources, the tracker connection) gets a
        # tenth of the budget, at most a second, so the whole stop stays within it
        reserve_s = min(1.0, budget_s / 10)
        graceful = asyncio.gather(*(s.stop(message) for s in supervisors), return_exceptions=True)
        try:
            await asyncio.wait_for(graceful, budget_s - reserve_s)
        except TimeoutError:
            self.abandoned_blocks = sum(s.pusher.unacknowledged_blocks() for s in supervisors)
            log.error(
                "stop timed out after %d ms: abandoning %d block(s) the tracker has not acknowledged; "
                "their offsets stay uncommitted, so the source reads those records again",
                self.config["receiver.stop_timeout_ms"],
                self.abandoned_blocks,
            )
            if supervisors:
                await asyncio.wait([asyncio.ensure_future(s.abandon()) for s in supervisors], timeout=reserve_s)
        if self.tracker is not None:
            await self.tracker.close()

    async def run(self, stop: asyncio.Event) -> None:
        """Start, serve until ``stop``, stop gracefully. A stop while still connecting just gives up."""
        starting = asyncio.ensure_future(self.start())
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
            else:
                starting.result()
                await self.wait(stop)
        finally:
            stopper.cancel()
            await self.stop()
