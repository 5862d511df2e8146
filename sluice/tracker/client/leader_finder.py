"""Which tracker a client talks to, given a leader and its standbys (``h1:7100,h2:7100``).

A client starts with the first address.  When a tracker cannot be reached, or its connection is
lost, it moves to the next in turn; when a tracker answers ``not_leader`` naming the leader, it
goes there next (a standby knows the leader from the lease), if it is one of the configured
trackers.  Every request is sent again after the move, and the tracker's deduplication of blocks
keeps a re-sent one exactly once.

A leader that is not on the list is never followed, whatever the transport: the list is what the
operator vouched for.  A standby's redirect comes from the lease, which anyone who can write the
log's prefix can write, so following it would hand the client's token, its blocks and its belief
in durability to an address nobody configured.  The client goes round its own list instead, and
reaches the leader under the name it was given (a tracker advertising another name is found so).
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

    def redirect(self, leader: str | None) -> bool:
        """The current tracker does not lead: go to the leader it named if it is configured, else to
        the next configured one.  Returns False when the named leader is a valid address that is
        not on the list (refused, for the caller to say so)."""
        if leader in self.addresses and leader != self.current:
            self.current = leader
            return True
        self.failed()
        if not leader or leader in self.addresses:  # none known yet, or the current one itself
            return True
        try:
            parse_address(leader)
        except InvalidArgument:
            return True
        return False
