"""The streaming page's server: the static page and the JSON API, with the headers every reply carries.

:class:`UIServer` binds (moving on from a taken port as Spark's UI does), then serves through
:mod:`~sluice.spark_driver.ui.transport` (every connection at once, each bounded in time and size)
and answers a request only when its ``Host`` is one the page was told about
(:mod:`~sluice.spark_driver.ui.hosts`).  Every reply says ``X-Content-Type-Options: nosniff`` (a
JSON error is never run as a script) and a Content-Security-Policy of ``default-src 'self'``: the
page loads its own three files and nothing else, with no inline script or style, so text the
tracker reported cannot run in it even if it ever reached the page as markup.  The static files
are package data, read once with ``importlib.resources``: the page needs no network and no build
step.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterable
from http import HTTPStatus
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sluice.errors import SluiceError
from sluice.spark_driver.ui.hosts import AllowedHosts
from sluice.spark_driver.ui.routes import PREFIX, BadRequest, NotFound, route
from sluice.spark_driver.ui.store import StreamingStore
from sluice.spark_driver.ui.transport import Limits, Reply, Request, Serving

log = logging.getLogger(__name__)

STATIC = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
}


LIMITS = Limits()


class UIServeError(SluiceError, OSError):
    """The streaming page cannot listen on the address it was given."""


def json_reply(status: HTTPStatus, value: Any) -> Reply:
    return Reply(status, json.dumps(value).encode(), "application/json")


def error_reply(status: HTTPStatus, message: str) -> Reply:
    return json_reply(status, {"error": message})


class Pages:
    """A request's reply: the Host check, then the page's files or the API."""

    def __init__(self, store: StreamingStore, hosts: AllowedHosts) -> None:
        self.store = store
        self.hosts = hosts
        package = resources.files(__package__)
        self.files = {name: package.joinpath("static", name).read_bytes() for name in STATIC}

    def __call__(self, request: Request) -> Reply:
        host = request.headers.get("host")
        if host is None and request.version != "HTTP/1.0":
            return error_reply(HTTPStatus.BAD_REQUEST, "a request without a Host header is not answered")
        if host is not None and not self.hosts.allows(host):
            return error_reply(HTTPStatus.FORBIDDEN, self.hosts.refusal(host))
        if request.method not in ("GET", "HEAD"):
            reply = error_reply(HTTPStatus.METHOD_NOT_ALLOWED, f"{request.method[:16]} is not allowed: GET only")
            return Reply(reply.status, reply.body, reply.content_type, {"Allow": "GET, HEAD"})
        parts = urlsplit(request.target)
        path = parts.path
        if path in ("/", "/index.html"):
            path = "/static/index.html"
        name = path.removeprefix("/static/")
        if path.startswith("/static/") and name in STATIC:
            return Reply(HTTPStatus.OK, self.files[name], STATIC[name] + "; charset=utf-8")
        if path == "/favicon.ico":  # browsers ask for it; the page has none
            return Reply(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        if not path.startswith(PREFIX):
            shown = path if len(path) <= 64 else path[:64] + "…"
            return error_reply(HTTPStatus.NOT_FOUND, f"no page {shown}: the page is /, the API {PREFIX}")
        try:
            answer = route(self.store, path.removeprefix(PREFIX).strip("/"), parse_qs(parts.query))
        except NotFound as exc:
            return error_reply(HTTPStatus.NOT_FOUND, str(exc))
        except BadRequest as exc:
            return error_reply(HTTPStatus.BAD_REQUEST, str(exc))
        return json_reply(HTTPStatus.OK, answer)


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=128)


class UIServer:
    """Serves the page and the API for ``store`` on ``host:port`` from one daemon thread.

    :param port: 0 picks a free port (``port`` then says which).
    :param port_retries: when ``port`` is taken, try the next ones, this many, as Spark's UI does from
        4040 (``spark.port.maxRetries``): two drivers on one host both get a page.
    :param allowed_hosts: names answered in ``Host`` besides loopback and ``host``
        (``driver.ui_allowed_hosts``).
    :param limits: what one client may take (time, connections, head size).
    """

    def __init__(
        self,
        store: StreamingStore,
        host: str = "127.0.0.1",
        port: int = 0,
        port_retries: int = 0,
        allowed_hosts: Iterable[str] = (),
        limits: Limits = LIMITS,
    ) -> None:
        tries = [port] if port == 0 else list(range(port, min(port + port_retries, 65535) + 1))
        for attempt in tries:
            try:
                sock = listen(host, attempt)
                break
            except OSError as exc:
                error = exc
        else:
            ports = f"{port}" if len(tries) == 1 else f"{port} (and the {len(tries) - 1} after it)"
            raise UIServeError(
                f"driver.ui_port {ports} on {host} cannot be served: {error.strerror or error}; "
                "choose another port (0 turns the page off)"
            ) from None
        self.host = host
        self.port = int(sock.getsockname()[1])
        if self.port != port and port != 0:
            log.warning("port %d of the streaming page is in use; serving on %d", port, self.port)
        self.hosts = AllowedHosts(host, allowed_hosts)
        self._serving = Serving(sock, Pages(store, self.hosts), error_reply, SECURITY_HEADERS, limits)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    @property
    def connections(self) -> int:
        """Connections being served now, at most ``limits.max_connections``."""
        return self._serving.connections

    def close(self) -> None:
        self._serving.close()
