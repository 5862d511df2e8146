"""The metrics endpoint with a web configuration file, on real sockets: TLS and basic auth, a
failed handshake that harms no one, the deadline over the handshake, the real tracker serving its
metrics this way, and hostile clients of basic auth (an overlong password, a wrong-password flood)."""

from __future__ import annotations

import base64
import collections
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry, Counter

from sluice import exposition, metrics_auth
from sluice.metrics_web_config import load
from sluice.testing import free_port, start_tracker, wait_until
from tests.test_metrics_web_config import self_signed

HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    self_signed(d)
    self_signed(d, "client")
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


@pytest.mark.parametrize(
    ("service", "args"),
    [("tracker", ["--wal-dir", "wal"]), ("receiver", ["--tracker", "127.0.0.1:1"]), ("driver", ["--app", "x:y"])],
)
def test_a_bad_web_config_stops_each_service_at_start_with_one_line(
    tmp_path: Path, service: str, args: list[str]
) -> None:
    bad = tmp_path / "web.yml"
    bad.write_text("basic_auth_users:\n  prometheus: secret\n")
    module = {"tracker": "tracker.server", "receiver": "receiver", "driver": "spark_driver"}[service]
    done = subprocess.run(
        [sys.executable, "-m", f"sluice.{module}.cli", *args, "--metrics-port", str(free_port()),
         "--metrics-web-config", str(bad)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
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
    stop = threading.Event()
    replies: collections.Counter[bytes] = collections.Counter()

    def flood(source: str) -> None:
        while not stop.is_set():
            try:
                replies[knock(port, basic("prometheus", b"wrong"), source)[:12]] += 1
            except OSError:
                replies[b"no reply"] += 1

    sources = [f"127.0.0.{1 + n % addresses}" for n in range(16)]
    threads = [threading.Thread(target=flood, args=(source,), daemon=True) for source in sources]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    served = []
    try:
        # a second in, every bucket is spent and, unchecked, the rounds' queue would be full
        wait_until(lambda: time.monotonic() - started > 1 and replies.total() > 50, "the flood under way", 20)
        for _ in range(4):
            try:
                served.append(knock(port, basic("prometheus", b"secret"))[:12])
            except OSError as exc:
                served.append(repr(exc).encode())
        # long enough for a thread running rounds unchecked to run several times the bucket's
        wait_until(lambda: time.monotonic() - started > 3, "three seconds of flood", 20)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    elapsed = time.monotonic() - started
    assert served == [b"HTTP/1.1 200"] * 4, (served, replies)
    if addresses == 1:
        assert server.auth.rounds <= 1 + metrics_auth.FAILURE_BURST + metrics_auth.FAILURES_PER_S * elapsed + 1
    assert replies[b"HTTP/1.1 429"] > 50 and server.refusals.counts["failed logins over the rate limit"] > 50


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
        [sys.executable, "-m", "sluice.tracker.server.cli", "--wal-dir", "wal", "--metrics-port", str(free_port()),
         "--metrics-web-config", str(web)],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"sluice-tracker: tracker.metrics_web_config {web}: tls_server_config needs both cert_file and key_file "
        "(for plain HTTP, leave the section out)"
    ]
