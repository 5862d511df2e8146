"""A TCP proxy in front of an S3 server that can stall the connections of chosen requests.

S3 throttles and slows down by key prefix, so one object's requests can hang while the rest of
the bucket answers: the tracker's lease renewals stuck while its log writes go through.  A stop of
the whole server cannot show that, so the tests put this proxy between a tracker and moto.  Each
connection is judged by the request line of its first request (botocore keeps a pool of
connections per client, and the tracker's lease has a client of its own): while :attr:`stalled`
is set, the bytes of a connection whose first request names a key matching :attr:`pattern` are
held, in both directions, until it is cleared.
"""

from __future__ import annotations

import re
import socket
import threading

__all__ = ["StallProxy"]


class StallProxy:
    """Forward 127.0.0.1:``port`` to ``target_port``; stall connections matching ``pattern``.

    :param target_port: the S3 server's port on loopback.
    :param pattern: matched against the first request line of each connection (``PUT /b/_lease ...``).
    """

    def __init__(self, target_port: int, pattern: str) -> None:
        self.target_port = target_port
        self.pattern = re.compile(pattern.encode())
        self.stalled = False
        self._open = threading.Event()  # set while nothing is stalled
        self._open.set()
        self.held = 0  # chunks held back so far (what a test waits on to know the stall bit)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="stall-proxy", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stall(self) -> None:
        self.stalled = True
        self._open.clear()

    def resume(self) -> None:
        self.stalled = False
        self._open.set()

    def close(self) -> None:
        self.resume()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._sockets += [client, server]
            judged: list[bool] = []  # whether it matches, from the first chunk the client sends
            for src, dst, upstream in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pipe, args=(src, dst, upstream, judged), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream: bool, judged: list[bool]) -> None:
        try:
            while data := src.recv(65536):
                if upstream and not judged:
                    judged.append(bool(self.pattern.search(data.split(b"\r\n", 1)[0])))
                while judged and judged[0] and self.stalled:
                    self.held += 1
                    self._open.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
