"""The streaming page's HTTP server: the static page and the JSON API, from one thread.

A PySpark driver has no event loop of its own to serve from (its main thread waits for the stop,
the job threads block in Py4J calls until Spark answers), so the page gets one daemon thread,
``sluice-ui``.  It serves one connection at a time (``http.server.HTTPServer``, not the threading
variant), each request answered from memory in microseconds and each connection closed after its
request; a client that stalls is dropped after :data:`TIMEOUT_S`, so no client can hold more than
one socket and that thread.  The static files are package data, read with ``importlib.resources``:
the page needs no network and no build step.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sluice.errors import SluiceError
from sluice.spark_driver.ui import api
from sluice.spark_driver.ui.store import StreamingStore

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
PREFIX = "/api/v1/streaming/"
STATIC = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}


class UIServeError(SluiceError, OSError):
    """The streaming page cannot listen on the address it was given."""


class NotFound(SluiceError, LookupError):
    """A path or batch the API does not have (answered 404)."""


class BadRequest(SluiceError, ValueError):
    """A query parameter the API does not allow (answered 400)."""


def route(store: StreamingStore, path: str, query: dict[str, list[str]]) -> Any:
    """The JSON answer for an API path (``PREFIX`` removed); raises :class:`NotFound` or :class:`BadRequest`."""
    interval = store.batch_interval_ms
    if path == "batches":
        wanted = query.get("status", [None])[0]
        if wanted is not None and wanted.lower() not in api.STATUS_FILTERS:
            raise BadRequest(f"status={wanted!r} is not allowed: expected one of {', '.join(api.STATUS_FILTERS)}")
        rows = [
            api.batch_json(info, blocks, interval)
            for info, blocks in reversed(store.batches())
            if wanted is None or api.batch_status(info) == wanted.upper()
        ]
        return rows
    if path.startswith("batches/"):
        key = path.removeprefix("batches/")
        if not (key.isascii() and key.isdigit()):
            raise BadRequest(f"batch id {key!r} is not allowed: expected the batch time in milliseconds")
        found = store.batch(int(key))
        if found is None:
            raise NotFound(f"no batch {key} (only the last {store.retained_batches} are kept)")
        return api.batch_detail(*found, interval)
    if path == "receivers":
        status, _ = store.tracker()
        return api.receivers_json(status, store.batches(), interval)
    if path == "statistics":
        status, _ = store.tracker()
        return api.statistics_json(
            [info for info, _ in store.batches()],
            store.totals(),
            api.receivers_json(status, [], interval),
            start_time_ms=store.start_time_ms,
            interval_ms=interval,
        )
    if path == "rates":
        return api.decisions_json(store.decisions())
    if path == "tracker":
        return api.tracker_json(*store.tracker(), store.tracker_address)
    raise NotFound(f"no endpoint {PREFIX}{path}")


def _handler(store: StreamingStore) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = TIMEOUT_S
        server_version = "sluice-ui"

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            path = parts.path
            if path in ("/", "/index.html"):
                path = "/static/index.html"
            if path.startswith("/static/") and path.removeprefix("/static/") in STATIC:
                name = path.removeprefix("/static/")
                body = resources.files(__package__).joinpath("static", name).read_bytes()
                self._send(HTTPStatus.OK, body, STATIC[name] + "; charset=utf-8")
                return
            if path == "/favicon.ico":  # browsers ask for it; the page has none
                self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
                return
            if not path.startswith(PREFIX):
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no page {path}: the page is /, the API {PREFIX}"})
                return
            try:
                answer = route(store, path.removeprefix(PREFIX).strip("/"), parse_qs(parts.query))
            except NotFound as exc:
                self._json(HTTPStatus.NOT_FOUND, {"error": str(exc)})
            except BadRequest as exc:
                self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            else:
                self._json(HTTPStatus.OK, answer)

        def _json(self, status: HTTPStatus, value: Any) -> None:
            self._send(status, json.dumps(value).encode(), "application/json")

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler


class UIServer:
    """Serves the page and the API for ``store`` on ``host:port`` from one daemon thread.

    :param port: 0 picks a free port (``port`` then says which).
    :param port_retries: when ``port`` is taken, try the next ones, this many, as Spark's UI does from
        4040 (``spark.port.maxRetries``): two drivers on one host both get a page.
    """

    def __init__(self, store: StreamingStore, host: str = "127.0.0.1", port: int = 0, port_retries: int = 0) -> None:
        tries = [port] if port == 0 else list(range(port, min(port + port_retries, 65535) + 1))
        for attempt in tries:
            try:
                self._server = HTTPServer((host, attempt), _handler(store))
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
        self.port = int(self._server.server_address[1])
        if self.port != port and port != 0:
            log.warning("port %d of the streaming page is in use; serving on %d", port, self.port)
        self._thread = threading.Thread(target=self._server.serve_forever, name="sluice-ui", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(TIMEOUT_S)
