"""Every configured tracker on the page: the leader the driver talks to and each standby.

The driver's own client follows the leader, so its ``status`` says only what the leader knows of
itself. A standby answers ``status`` too (only its other requests get ``not_leader``), so each
other configured tracker is asked through a client of its own, with the driver's credentials and a
short timeout: a standby that is down costs the page one short wait, then says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

NODE_TIMEOUT_S = 1.0


class TrackerNodes:
    """The ``status`` of the tracker the driver is connected to, with ``nodes``: each configured
    tracker's leadership (role, leader, since when, log position) or why it could not be asked.

    :param addresses: the configured trackers (``driver.tracker``'s list).
    :param leader_status: the ``status`` reply through the driver's client (``None``: not connected).
    :param connect: a started client of one address (``status()`` and ``close()``), made on first
        use and kept; dropped after a failure so the next refresh connects again.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        leader_status: Callable[[], Mapping[str, Any] | None],
        connect: Callable[[str], Any],
    ) -> None:
        self.addresses = list(addresses)
        self._leader_status = leader_status
        self._connect = connect
        self._clients: dict[str, Any] = {}

    def status(self) -> dict[str, Any] | None:
        reply = self._leader_status()
        if reply is None:
            return None
        status = dict(reply)
        answered = status.get("leadership")
        nodes = []
        for address in self.addresses:
            if isinstance(answered, Mapping) and answered.get("node") == address:
                nodes.append(node(address, answered, None))
                continue
            try:
                nodes.append(node(address, self._ask(address).get("leadership"), None))
            except Exception as exc:  # noqa: BLE001 - the page says this tracker is away, in one line
                self._drop(address)
                nodes.append(node(address, None, f"{type(exc).__name__}: {exc}"))
        if len(nodes) > 1 or answered is not None:
            status["nodes"] = nodes
        return status

    def _ask(self, address: str) -> Mapping[str, Any]:
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = self._connect(address)
        return client.status()

    def _drop(self, address: str) -> None:
        client = self._clients.pop(address, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        for address in list(self._clients):
            self._drop(address)


def siblings_of(client_of: Callable[[], Any]) -> Callable[[str], Any]:
    """``connect`` for :class:`TrackerNodes`: a client of another tracker made like the driver's own
    (``client_of()``, a :class:`~sluice.tracker.client.sync_client.SyncTrackerClient`), each wait short."""
    return lambda address: client_of().sibling(address, request_timeout=NODE_TIMEOUT_S, connect_timeout=NODE_TIMEOUT_S)


def node(address: str, leadership: Any, error: str | None) -> dict[str, Any]:
    """One tracker's row: its leadership fields when it reported them (a tracker on a local log
    reports none: it is the only one), else why not."""
    fields = leadership if isinstance(leadership, Mapping) else {}
    return {
        "address": address,
        "reachable": error is None,
        "role": fields.get("role", "leader" if error is None else None),
        "leader": fields.get("leader"),
        "leaderSinceMs": fields.get("leader_since_ms"),
        "logPosition": fields.get("log_position"),
        "error": error,
    }
