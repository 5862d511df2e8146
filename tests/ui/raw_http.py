"""HTTP over a bare socket, for the tests of what a hostile client can send the streaming page: a
request urllib would refuse to write (a huge line, a foreign ``Host``, no ``Host``), read to the
server's close."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(target: str, host: str | None = "127.0.0.1", extra: str = "") -> bytes:
    head = f"GET {target} HTTP/1.1\r\n" + (f"Host: {host}\r\n" if host is not None else "") + extra
    return (head + "\r\n").encode("latin-1")


def exchange(port: int, data: bytes, timeout: float = 10.0) -> Answer:
    """Send ``data``, read until the server closes; the reply parsed."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.lower()] = value.strip()
    return Answer(int(lines[0].split(" ")[1]), headers, body)


def get(port: int, target: str, host: str | None = "127.0.0.1", timeout: float = 10.0) -> Answer:
    return exchange(port, request(target, host), timeout)
