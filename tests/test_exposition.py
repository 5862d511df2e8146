"""The metrics endpoint: loopback by default, one thread whatever the connections, each timed out."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from sluice import exposition
from sluice.embedded import free_port


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.read().decode()


@pytest.mark.slow
def test_idle_connections_take_no_thread_and_time_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exposition, "DEADLINE_S", 0.5)
    registry = CollectorRegistry()
    Counter("probe_total", "a probe", registry=registry).inc()
    port = free_port()
    threads = threading.active_count()
    exposition.serve(port, [registry])
    assert "probe_total 1.0" in scrape(port)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
    try:
        time.sleep(0.2)
        assert threading.active_count() == threads + 1  # the server's one thread, not one per connection
        for sock in idle:  # each closed by the server: past the cap at once, the others at the deadline
            sock.settimeout(5)
            assert sock.recv(1) == b""
        assert "probe_total 1.0" in scrape(port)
    finally:
        for sock in idle:
            sock.close()


def test_the_endpoint_binds_loopback_unless_told() -> None:
    server = exposition.serve(free_port(), [CollectorRegistry()])
    assert server is not None and server.listener is not None
    assert {sock.getsockname()[0] for sock in server.listener.sockets} == {"127.0.0.1"}


def test_idle_connections_at_the_cap_never_keep_a_scrape_out() -> None:
    """Sixteen sockets opened and left idle took every slot: only 1 to 3 of 47 scrapes got through
    in their 10 s.  Now a new connection closes the oldest one still sending its request."""
    registry = CollectorRegistry()
    Counter("probe_total", "a probe", registry=registry).inc()
    port = free_port()
    server = exposition.serve(port, [registry])
    assert server is not None
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(exposition.MAX_CONNECTIONS)]
    try:
        for _ in range(47):
            idle.append(socket.create_connection(("127.0.0.1", port)))  # the cap stays full of idle sockets
            assert "probe_total 1.0" in scrape(port)
        assert server.refusals.counts["idle connections closed for new ones"] >= 47
        assert server.open <= exposition.MAX_CONNECTIONS
    finally:
        for sock in idle:
            sock.close()
