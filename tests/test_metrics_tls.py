"""The metrics endpoint with a web configuration file, on real sockets: TLS and basic auth, a
failed handshake that harms no one, the deadline over the handshake, the real tracker serving its
metrics this way, and hostile clients of basic auth (an overlong password, a wrong-password flood)."""

from __future__ import annotations

import base64
import json
import select
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry, Counter

from sluice import exposition, metrics_auth
from sluice.embedded import driver_argv, free_port, receiver_argv, start_tracker, tracker_argv, wait_until
from sluice.embedded.certs import self_signed
from sluice.metrics_web_config import load

HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    self_signed(d, hosts=("127.0.0.1", "localhost"))
    self_signed(d, "client", hosts=("127.0.0.1", "localhost"))
    return d


def web_file(d: Path, extra_tls: str = "") -> Path:
    path = d / "web.yml"
    path.write_text(
        f"tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n{extra_tls}"
        f"basic_auth_users:\n  prometheus: '{HASH}'\n"
    )
    return path


def client_context(pki: Path, cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki / "server.pem")
    if cert:
        context.load_cert_chain(pki / "client.pem", pki / "client.key")
    return context


def scrape(port: int, context: ssl.SSLContext, user: str | None = "prometheus", password: str = "secret") -> str:
    """The body of an HTTPS scrape; raises HTTPError (401) or URLError (handshake refused)."""
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if user is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    with urllib.request.urlopen(request, timeout=5, context=context) as reply:
        return reply.read().decode()


def start(pki: Path, extra_tls: str = "") -> tuple[int, exposition.MetricsServer]:
    registry = CollectorRegistry()
    Counter("probe_total", "a probe", registry=registry).inc()
    port = free_port()
    server = exposition.serve(port, [registry], web=load(str(web_file(pki, extra_tls)), "test.metrics_web_config"))
    assert server is not None
    return port, server


def test_a_scrape_over_tls_with_the_password_is_served(pki: Path) -> None:
    port, _ = start(pki)
    assert "probe_total 1.0" in scrape(port, client_context(pki))


@pytest.mark.parametrize(("user", "password"), [(None, ""), ("prometheus", "wrong"), ("someone", "secret")])
def test_no_or_a_wrong_password_gets_401_asking_for_basic_auth(pki: Path, user: str | None, password: str) -> None:
    port, server = start(pki)
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape(port, client_context(pki), user, password)
    assert refused.value.code == 401
    assert refused.value.headers["WWW-Authenticate"] == 'Basic realm="sluice"'
    assert server.refusals.counts == {"bad or missing credentials": 1}


def test_plain_http_on_the_tls_port_is_refused_and_the_server_goes_on(pki: Path) -> None:
    port, server = start(pki)
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            while sock.recv(4096):  # a TLS alert at most, then closed
                pass
    wait_until(lambda: server.refusals.counts["failed TLS handshakes"] == 3, "three refused handshakes", 5)
    assert server.open == 0
    assert "probe_total 1.0" in scrape(port, client_context(pki))


@pytest.mark.timing("tolerates 3 s for a deadline of about a second: another worker busy beside it")
def test_a_stalled_handshake_counts_against_the_deadline(pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exposition, "DEADLINE_S", 0.5)
    port, server = start(pki)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:  # connects, never says hello
        started = time.monotonic()
        assert sock.recv(1) == b""
        assert time.monotonic() - started < 3
    wait_until(lambda: server.open == 0, "the connection released", 5)


def test_client_certificates_are_required_with_a_client_ca(pki: Path) -> None:
    port, server = start(pki, "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: client.pem\n")
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        scrape(port, client_context(pki))
    assert "probe_total 1.0" in scrape(port, client_context(pki, cert=True))
    wait_until(lambda: server.refusals.counts["failed TLS handshakes"] == 1, "the refused handshake counted", 5)


@pytest.mark.slow
def test_the_tracker_serves_its_metrics_over_tls_with_basic_auth(pki: Path, tmp_path: Path) -> None:
    metrics_port = free_port()
    config = tmp_path / "tracker.toml"
    config.write_text(f'[tracker]\nmetrics_port = {metrics_port}\nmetrics_web_config = "{web_file(pki)}"\n')
    tracker = start_tracker(tmp_path / "wal", args=["--no-fsync", "--config", str(config)])
    try:
        wait_until(lambda: _serves(metrics_port, pki), "the tracker's metrics over TLS", 10)
        with pytest.raises(urllib.error.HTTPError, match="401"):
            scrape(metrics_port, client_context(pki), "prometheus", "wrong")
        with pytest.raises(ConnectionError):  # plain HTTP: the handshake fails, nothing is served
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
    finally:
        tracker.stop()


def _serves(port: int, pki: Path) -> bool:
    try:
        return "sluice_tracker_" in scrape(port, client_context(pki))
    except (urllib.error.URLError, ConnectionError):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("service", ["tracker", "receiver", "driver"])
def test_a_bad_web_config_stops_each_service_at_start_with_one_line(tmp_path: Path, service: str) -> None:
    bad = tmp_path / "web.yml"
    bad.write_text("basic_auth_users:\n  prometheus: secret\n")
    extra = ["--metrics-port", str(free_port()), "--metrics-web-config", str(bad)]
    argv = {
        "tracker": tracker_argv(None, "wal", extra=extra),
        "receiver": receiver_argv("127.0.0.1:1", source=None, extra=extra),
        "driver": driver_argv(app="x:y", extra=extra),
    }[service]
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"sluice-{service}: {service}.metrics_web_config {bad}: basic_auth_users.prometheus is not a bcrypt hash "
        "($2a$, $2b$ or $2y$, 60 characters)"
    ]


def knock(port: int, authorization: bytes, source: str = "127.0.0.1") -> bytes:
    """The status line answering one plain-HTTP request with ``authorization`` (b"": none came)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0)) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " + authorization + b"\r\n\r\n")
        return sock.makefile("rb").readline()


def basic(user: str, password: bytes) -> bytes:
    return b"Basic " + base64.b64encode(user.encode() + b":" + password)


def users_only(d: Path, hashed: str = HASH) -> Path:
    """A web configuration with basic auth and no TLS (plain sockets keep the floods cheap)."""
    path = d / "users.yml"
    path.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    return path


@pytest.mark.slow
def test_a_password_over_72_bytes_gets_401_and_no_traceback_from_the_tracker(tmp_path: Path) -> None:
    """bcrypt raises for such a password: each one cost a 21-line traceback and no reply."""
    metrics_port = free_port()
    tracker = start_tracker(
        tmp_path / "wal",
        args=["--no-fsync", "--metrics-port", str(metrics_port), "--metrics-web-config", str(users_only(tmp_path))],
    )
    try:
        wait_until(lambda: _listens(metrics_port), "the tracker's metrics port", 10)
        for _ in range(200):
            assert knock(metrics_port, basic("prometheus", b"x" * 100)).startswith(b"HTTP/1.1 401 "), "no 401"
        assert knock(metrics_port, basic("prometheus", b"secret")).startswith(b"HTTP/1.1 200 ")
    finally:
        tracker.stop()
    said = tracker.log.read_text(errors="replace")
    assert "Traceback" not in said and "ValueError" not in said, said[-3000:]
    assert sum("metrics endpoint" in line for line in said.splitlines()) <= 1  # refusals at a bounded rate


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


# sixteen threads sending one wrong password after another to port argv[1] from the addresses of
# argv[2] until argv[3] seconds have passed, then the count of each status line, as JSON: another
# process, as an attacker is, so the scraper in the test does not queue for the same GIL
FLOOD = r"""
import base64, collections, json, socket, sys, threading, time
port, sources, until = int(sys.argv[1]), sys.argv[2].split(","), time.monotonic() + float(sys.argv[3])
auth = b"Basic " + base64.b64encode(b"prometheus:wrong")
replies = collections.Counter()
def flood(source):
    while time.monotonic() < until:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0)) as sock:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " + auth + b"\r\n\r\n")
                replies[sock.makefile("rb").readline()[:12].decode()] += 1
        except OSError:
            replies["no reply"] += 1
threads = [threading.Thread(target=flood, args=(sources[n % len(sources)],)) for n in range(16)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(replies))
"""


@pytest.mark.slow
@pytest.mark.parametrize("addresses", [1, 16], ids=["the-scrapers-address", "sixteen-addresses"])
def test_correct_scrapes_get_through_a_wrong_password_flood_which_runs_few_bcrypt_rounds(
    tmp_path: Path, addresses: int
) -> None:
    """Sixteen clients sending wrong passwords as fast as they can: each round they forced cost
    ~1/16 s of CPU, and their connections waiting on rounds kept the scraper out.  Now the
    scraper's remembered password costs no round; from one address (the scraper's own) the flood
    runs only its bucket's rounds (5 at once, then 1/s), from sixteen at most 4 rounds wait, and the
    rest gets 429 at once."""
    cost10 = bcrypt.hashpw(b"secret", bcrypt.gensalt(10)).decode()  # a real cost: a round is felt
    port = free_port()
    server = exposition.serve(port, [_probe()], web=load(str(users_only(tmp_path, cost10)), "test.metrics_web_config"))
    assert server is not None and server.auth is not None
    assert knock(port, basic("prometheus", b"secret")).startswith(b"HTTP/1.1 200 ")  # Prometheus scraped before
    sources = ",".join(f"127.0.0.{1 + n}" for n in range(addresses))
    started = time.monotonic()
    attacker = subprocess.Popen([sys.executable, "-c", FLOOD, str(port), sources, "4"], stdout=subprocess.PIPE)
    served = []
    try:
        # a second in, every bucket is spent and, unchecked, the rounds' queue would be full
        wait_until(
            lambda: time.monotonic() - started > 1.5 and server.refusals.counts.total() > 50,
            "the flood under way",
            20,
            procs=[attacker],
        )
        for _ in range(4):
            try:
                served.append(knock(port, basic("prometheus", b"secret"))[:12])
            except OSError as exc:
                served.append(repr(exc).encode())
        out, _ = attacker.communicate(timeout=30)
    finally:
        attacker.kill()
    elapsed = time.monotonic() - started
    replies = json.loads(out)
    assert served == [b"HTTP/1.1 200"] * 4, (served, replies)
    if addresses == 1:
        assert server.auth.rounds <= 1 + metrics_auth.FAILURE_BURST + metrics_auth.FAILURES_PER_S * elapsed + 1
    assert replies.get("HTTP/1.1 429", 0) > 50, replies
    assert server.refusals.counts["failed logins over the rate limit"] > 50


@pytest.mark.slow
def test_a_scrape_waiting_on_its_bcrypt_round_is_not_closed_for_new_connections(tmp_path: Path) -> None:
    """At the cap a new connection closes the oldest one still sending its request, never one whose
    request is in: a first scrape waiting a whole round (cost 13, half a second or more) keeps its
    place while sixteen idle sockets arrive, and the oldest of them is closed instead."""
    cost13 = bcrypt.hashpw(b"secret", bcrypt.gensalt(13)).decode()
    port = free_port()
    server = exposition.serve(port, [_probe()], web=load(str(users_only(tmp_path, cost13)), "test.metrics_web_config"))
    assert server is not None and server.auth is not None
    auth = server.auth
    with socket.create_connection(("127.0.0.1", port), timeout=10) as scrape_sock:
        scrape_sock.sendall(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " + basic("prometheus", b"secret") + b"\r\n\r\n"
        )
        deadline = time.monotonic() + 5
        while auth.rounds == 0 and time.monotonic() < deadline:  # finer than wait_until: the round is short
            time.sleep(0.001)
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(exposition.MAX_CONNECTIONS)]
        try:
            wait_until(lambda: server.refusals.counts["idle connections closed for new ones"] == 1, "one closed", 5)
            ready, _, _ = select.select([scrape_sock], [], [], 0)
            assert not ready, "the scrape was closed, or answered before the idle sockets came (a round too fast)"
            assert scrape_sock.makefile("rb").readline().startswith(b"HTTP/1.1 200 ")
            idle[0].settimeout(5)
            assert idle[0].recv(1) == b""  # the oldest idle one was closed instead
        finally:
            for sock in idle:
                sock.close()


def _probe() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("probe_total", "a probe", registry=registry).inc()
    return registry


@pytest.mark.slow
@pytest.mark.parametrize("section", ["tls_server_config: {}\n", "tls_server_config:\n"])
def test_an_empty_tls_section_stops_the_tracker_rather_than_serve_plain_http(tmp_path: Path, section: str) -> None:
    web = tmp_path / "web.yml"
    web.write_text(section)
    done = subprocess.run(
        [
            sys.executable,
            *tracker_argv(None, "wal", extra=["--metrics-port", str(free_port()), "--metrics-web-config", str(web)]),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"sluice-tracker: tracker.metrics_web_config {web}: tls_server_config needs both cert_file and key_file "
        "(for plain HTTP, leave the section out)"
    ]
