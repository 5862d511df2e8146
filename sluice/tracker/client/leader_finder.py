"""Which tracker a client talks to, given a leader and its standbys (``h1:7100,h2:7100``).

A client starts with the first address.  When a tracker cannot be reached, or its connection is
lost, it moves to the next in turn; when a tracker answers ``not_leader`` naming the leader, it
goes there next (a standby knows the leader from the lease).  Every request is sent again after
the move, and the tracker's deduplication of blocks keeps a re-sent one exactly once.
"""

from __future__ import annotations

from sluice.errors import InvalidArgument


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()):
        raise InvalidArgument(f"tracker address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def parse_addresses(addresses: str) -> list[str]:
    """``h1:7100,h2:7100`` as a list, each checked; one address is a list of one."""
    found = [a.strip() for a in addresses.split(",") if a.strip()]
    if not found:
        raise InvalidArgument(f"tracker address {addresses!r} is empty: give HOST:PORT, or several separated by commas")
    for address in found:
        parse_address(address)
    return found


class LeaderFinder:
    """The address to try next among the configured trackers (and a leader one of them named)."""

    def __init__(self, addresses: str) -> None:
        self.addresses = parse_addresses(addresses)
        self._next = 0
        self.current = self.addresses[0]

    def failed(self) -> None:
        """The current tracker is unreachable or went away: try the next configured one."""
        self._next = (self.addresses.index(self.current) + 1) if self.current in self.addresses else self._next
        self._next %= len(self.addresses)
        self.current = self.addresses[self._next]

    def redirect(self, leader: str | None, safe_unlisted: bool = True) -> None:
        """The current tracker does not lead: go to the leader it named, else to the next one.

        ``safe_unlisted``: whether a leader that is not one of the configured trackers may be
        followed (the client's token would not travel in clear to it); when not, only a configured
        one is."""
        if not leader or leader == self.current:
            self.failed()
            return
        try:
            parse_address(leader)
        except InvalidArgument:
            self.failed()
            return
        if leader in self.addresses or safe_unlisted:
            self.current = leader
        else:
            self.failed()
