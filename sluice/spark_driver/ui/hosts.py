"""Which ``Host`` headers the streaming page answers: a guard against DNS rebinding.

A page on loopback is still reachable from any web page the user opens: a hostile site whose name
resolves first to itself, then to ``127.0.0.1``, has the browser send its script's requests to the
driver, and the same-origin policy lets that script read the replies, because the browser believes
it talks to the hostile name.  What gives it away is the ``Host`` header, which carries the name the
browser resolved.  So the page answers only names it was told about: loopback (``localhost`` and
the loopback addresses), the address it listens on, and the names in ``driver.ui_allowed_hosts``.
The port is not compared: rebinding keeps the port, the name is what changes.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

SETTING = "driver.ui_allowed_hosts"
WILDCARDS = ("0.0.0.0", "::", "")  # every interface: a bind address that names no host


def parse_names(value: str) -> list[str]:
    """The names of a comma-separated setting, lower-cased, brackets and a trailing dot removed."""
    return [_normal(part) for part in value.split(",") if part.strip()]


def _normal(name: str) -> str:
    return name.strip().removeprefix("[").removesuffix("]").rstrip(".").lower()


def host_name(header: str) -> str:
    """The name of a ``Host`` header without its port: ``a.b:4050`` -> ``a.b``, ``[::1]:80`` -> ``::1``."""
    value = header.strip()
    if value.startswith("["):
        return _normal(value.partition("]")[0])
    name, _, _port = value.partition(":")
    return _normal(name)


class AllowedHosts:
    """The names the page answers to, from where it listens and what was configured.

    :param bind_host: the address the page listens on (allowed unless it is a wildcard).
    :param names: further names (``driver.ui_allowed_hosts``): the host's DNS name or address when
        the page is bound to every interface and opened from another machine.
    """

    def __init__(self, bind_host: str, names: Iterable[str] = ()) -> None:
        bind = _normal(bind_host)
        self.names = frozenset(["localhost", *(() if bind in WILDCARDS else (bind,)), *map(_normal, names)])

    def allows(self, header: str) -> bool:
        name = host_name(header)
        if name in self.names:
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    def refusal(self, header: str) -> str:
        """The one-line 403 text: which name was refused and what is answered."""
        shown = header if len(header) <= 64 else header[:64] + "…"
        return (
            f"Host {shown!r} is not answered: this page answers loopback and "
            f"{', '.join(sorted(self.names))}; add the name to {SETTING} to open it by that name"
        )
