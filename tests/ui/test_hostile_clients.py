"""What a hostile client can do to the streaming page, on a real server over real sockets: hold
it (a slow sender, idle sockets, more sockets than it serves), make it parse too much (a huge
request line, too many headers, a batch id of thousands of digits), or reach it by a rebound DNS
name; and the headers every reply carries, refusals included."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from sluice.config import ConfigError, key
from sluice.spark_driver.ui import UIServer
from sluice.spark_driver.ui.store import StreamingStore
from sluice.spark_driver.ui.transport import Limits
from tests.polling import wait_until
from tests.ui.raw_http import Answer, exchange, get, request

STATS = "/api/v1/streaming/statistics"


@pytest.fixture
def server() -> Iterator[UIServer]:
    ui = UIServer(StreamingStore(1000), "127.0.0.1", 0, allowed_hosts=["driver.example"])
    yield ui
    ui.close()


def idle(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]


def timed_get(port: int, target: str = STATS) -> tuple[Answer, float]:
    start = time.monotonic()
    answer = get(port, target, timeout=30)
    return answer, time.monotonic() - start


@pytest.mark.slow
def test_a_slow_sender_never_delays_another_client_and_is_cut_off_at_the_deadline() -> None:
    ui = UIServer(StreamingStore(1000), "127.0.0.1", 0, limits=Limits(deadline_s=3.0))
    loris = socket.create_connection(("127.0.0.1", ui.port), timeout=30)
    stop = threading.Event()

    def drip() -> None:  # a byte every half second: each read has data, only the deadline ends it
        for byte in b"GET /api/v1/streaming/statistics HTTP/1.1\r\nX-Long: " + b"a" * 200:
            if stop.wait(0.5):
                return
            try:
                loris.sendall(bytes([byte]))
            except OSError:  # cut off
                return

    sender = threading.Thread(target=drip, daemon=True)
    started = time.monotonic()
    sender.start()
    try:
        for _ in range(3):  # while it drips, each page request is answered at once
            answer, took = timed_get(ui.port)
            assert answer.status == 200 and took < 1.0, took
        loris.settimeout(10)
        try:
            assert loris.recv(1024) == b""  # closed without a reply: it ran out of time
        except ConnectionResetError:
            pass
        assert 2.5 < time.monotonic() - started < 5.0  # at the deadline, though it kept sending
    finally:
        stop.set()
        sender.join(5)
        loris.close()
        ui.close()


@pytest.mark.slow
def test_idle_sockets_do_not_hold_the_page(server) -> None:
    sockets = idle(server.port, 10)
    try:
        answer, took = timed_get(server.port)
        assert answer.status == 200 and took < 1.0, took
    finally:
        for s in sockets:
            s.close()


@pytest.mark.slow
def test_connections_past_the_bound_are_answered_503_at_once_until_a_place_frees() -> None:
    ui = UIServer(StreamingStore(1000), "127.0.0.1", 0, limits=Limits(deadline_s=2.0, max_connections=4))
    sockets = idle(ui.port, 4)
    try:
        wait_until(lambda: ui.connections == 4, "the four idle connections accepted", 10)
        busy, took = timed_get(ui.port)
        assert busy.status == 503 and took < 1.0, took
        assert busy.json() == {"error": "too many connections; try again shortly"}
        assert busy.headers["x-content-type-options"] == "nosniff"
        for s in sockets:  # the idle ones are cut at their deadline: the page answers again
            s.settimeout(10)
            assert s.recv(16) == b""
        answer, _ = timed_get(ui.port)
        assert answer.status == 200
    finally:
        for s in sockets:
            s.close()
        ui.close()


def test_a_batch_id_of_thousands_of_digits_is_one_400_and_no_log_line(server, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="sluice")
    answer = get(server.port, "/api/v1/streaming/batches/" + "9" * 5000)
    assert answer.status == 400
    error = answer.json()["error"]
    assert "\n" not in error and len(error) < 200
    assert error.endswith(
        "(5000 characters) is not allowed: expected the batch time in epoch milliseconds, at most 19 digits"
    )
    assert get(server.port, "/api/v1/streaming/batches/" + "9" * 20).status == 400  # past a 64-bit id
    assert get(server.port, "/api/v1/streaming/batches/" + "1" * 19).status == 404
    assert get(server.port, "/api/v1/streaming/batches?length=" + "9" * 5000).status == 400
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []


def test_heads_past_their_bounds_are_refused_with_their_status(server) -> None:
    long_line = exchange(server.port, request("/api/v1/streaming/batches/" + "9" * 9000))
    assert long_line.status == 414 and "request line is over 8192 bytes" in long_line.json()["error"]
    many = "".join(f"X-{i}: {i}\r\n" for i in range(100))
    assert exchange(server.port, request(STATS, extra=many)).status == 431
    wide = "".join(f"X-{i}: {'a' * 4000}\r\n" for i in range(6))
    assert exchange(server.port, request(STATS, extra=wide)).status == 431
    assert exchange(server.port, b"NONSENSE\r\n\r\n").status == 400
    assert exchange(server.port, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").status == 405


def test_only_loopback_the_bind_address_and_configured_names_are_answered(server) -> None:
    port = server.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}", "127.0.0.2",
                 f"driver.example:{port}", "Driver.Example."):  # fmt: skip
        assert get(port, STATS, host=host).status == 200, host
    refused = get(port, STATS, host=f"rebound.attacker.example:{port}")
    assert refused.status == 403
    assert refused.json()["error"] == (
        f"Host 'rebound.attacker.example:{port}' is not answered: this page answers loopback and "
        "127.0.0.1, driver.example, localhost; add the name to driver.ui_allowed_hosts to open it by that name"
    )
    assert get(port, "/", host="10.1.2.3").status == 403  # an address not configured is refused too
    assert get(port, STATS, host=None).status == 400  # HTTP/1.1 without Host
    assert exchange(port, f"GET {STATS} HTTP/1.0\r\n\r\n".encode()).status == 200  # 1.0 has none


def test_every_reply_says_nosniff_and_a_self_only_content_security_policy(server) -> None:
    answers = [
        get(server.port, "/"),
        get(server.port, "/static/app.js"),
        get(server.port, STATS),
        get(server.port, "/api/v1/streaming/batches/x"),
        get(server.port, "/nothing"),
        get(server.port, STATS, host="rebound.attacker.example"),
        exchange(server.port, request("/" + "a" * 9000)),
    ]
    assert [a.status for a in answers] == [200, 200, 200, 400, 404, 403, 414]
    for answer in answers:
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["content-security-policy"].startswith("default-src 'self';")
    page = answers[0].body.decode()
    assert "<script>" not in page and "<style" not in page and " style=" not in page  # nothing inline


def test_the_allowed_hosts_setting_takes_names_and_addresses_only() -> None:
    setting = key("driver.ui_allowed_hosts")
    assert setting.coerce("driver.example, 10.1.2.3,[fd00::1]", "test") == "driver.example, 10.1.2.3,[fd00::1]"
    with pytest.raises(ConfigError, match="driver.ui_allowed_hosts = 'a.example:4050' .* expected host names"):
        setting.coerce("a.example:4050", "test")


def test_a_reply_waiting_on_the_tracker_holds_no_other_reply() -> None:
    asked, release = threading.Event(), threading.Event()

    def slow_tracker() -> dict:
        asked.set()
        release.wait(30)
        return {"receivers": {}}

    ui = UIServer(StreamingStore(1000, tracker_status=slow_tracker), "127.0.0.1", 0)
    waiting = threading.Thread(target=get, args=(ui.port, "/api/v1/streaming/tracker"), daemon=True)
    try:
        waiting.start()
        assert asked.wait(10)
        assert get(ui.port, "/", timeout=5).status == 200  # served while the tracker is being asked
        assert get(ui.port, "/api/v1/streaming/batches", timeout=5).status == 200
    finally:
        release.set()
        waiting.join(10)
        ui.close()
