"""TLS on every hop, through the real CLIs, with certificates from
:class:`~sluice.embedded.certs.CertificateAuthority`.

The tracker (``sluice-tracker``) requires client certificates from its CA and takes each peer's
role from the certificate's common name; a receiver (``sluice-receiver``, generator source) and the
driver's receiver-mode source (built from the driver CLI's own configuration) reach it only over
TLS 1.2+, verifying the tracker's certificate and hostname.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from sluice.config import resolve
from sluice.embedded import (
    free_port,
    receiver_argv,
    start_service,
    start_tracker,
    stop_process,
    tracker_argv,
    wait_until,
)
from sluice.embedded.certs import CertificateAuthority
from sluice.spark_driver.cli import SECTIONS, build_source
from sluice.spark_driver.source import SourceContext
from sluice.tracker.client.sync_client import SyncTrackerClient
from sluice.tracker.client.tracker_client import TrackerClient
from sluice.tracker.wire.protocol import RemoteError
from sluice.tracker.wire.tls import client_context

pytestmark = pytest.mark.slow


def make_pki(d: Path) -> dict[str, Path]:
    """A CA, the tracker's certificate (127.0.0.1 and localhost) and client certificates per role."""
    ca = CertificateAuthority(d)
    pairs = [
        ca.server("tracker", hosts=("localhost", "127.0.0.1")),
        ca.client("receiver"),
        ca.client("driver"),
        ca.issue("other-host", hosts=("elsewhere.example",), usage="serverAuth"),
    ]
    files = {"ca": ca.cert}
    for pair in pairs:
        files[pair.name] = pair.cert
        files[f"{pair.name}.key"] = pair.key
    return files


def test_receiver_and_driver_reach_the_tracker_over_mutual_tls(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    store = (tmp_path / "blocks").as_uri()
    tracker = start_tracker(
        tmp_path / "wal",
        args=[
            "--tls-cert",
            str(pki["tracker"]),
            "--tls-key",
            str(pki["tracker.key"]),
            "--tls-client-ca",
            str(pki["ca"]),
            "--block-store",
            store,
        ],
    )
    receiver = start_service(
        receiver_argv(
            tracker.address,
            source="generator",
            block_store=store,
            block_interval_ms=50,
            extra=[
                "--generator-total",
                "300",
                "--tls-ca",
                str(pki["ca"]),
                "--tls-cert",
                str(pki["receiver"]),
                "--tls-key",
                str(pki["receiver.key"]),
            ],
        ),
        log=tmp_path / "receiver.log",
    )
    config = resolve(
        SECTIONS,
        {
            "driver.tracker": tracker.address,
            "driver.tls_ca": str(pki["ca"]),
            "driver.tls_cert": str(pki["driver"]),
            "driver.tls_key": str(pki["driver.key"]),
            "driver.block_store": store,
        },
    )
    source = build_source(config, None)
    try:
        source.start(SourceContext(spark=None, batch_interval_ms=1000))
        client = source.client
        got: list = []

        def allocated() -> bool:
            blocks = client.allocate_blocks(int(time.time() * 1000))
            got.extend((blocks or {}).get(0, []))
            return sum(b.num_records for b in got) >= 300

        wait_until(allocated, "300 records over TLS", 60, [tracker.proc, receiver], tmp_path / "receiver.log")
        assert all(b.location.startswith(store + "/stream-0/") for b in got)
        with pytest.raises(RemoteError, match="forbidden"):  # the driver's certificate gives the driver role only
            client.register_receiver(0, "fake", "h")
    finally:
        source.stop()
        stop_process(receiver)
    try:
        # No client certificate: the handshake fails. A certificate for another host: the client refuses it.
        no_cert = SyncTrackerClient(
            tracker.address, "receiver", ssl=client_context("receiver", str(pki["ca"])), connect_timeout=3
        )
        with pytest.raises(Exception):  # noqa: B017 - TrackerUnavailable or an SSL error, both refuse
            no_cert.start()
        no_cert.close()
        wrong_ca = SyncTrackerClient(
            tracker.address,
            "driver",
            connect_timeout=3,
            ssl=client_context("driver", str(pki["other-host"]), str(pki["driver"]), str(pki["driver.key"])),
        )
        with pytest.raises(Exception):  # noqa: B017
            wrong_ca.start()
        wrong_ca.close()
    finally:
        assert tracker.stop() == 0


def test_a_tracker_exposed_without_credentials_refuses_to_start(tmp_path: Path) -> None:
    port = free_port()
    refused = subprocess.run(
        [sys.executable, *tracker_argv(f"0.0.0.0:{port}", tmp_path / "wal")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "is not loopback and no credential is configured" in refused.stderr
    insecure = start_service(
        tracker_argv(f"0.0.0.0:{port}", tmp_path / "wal", extra=["--insecure", "true"]),
        port=port,
        log=tmp_path / "tracker.log",
    )
    try:
        assert "INSECURE" in (tmp_path / "tracker.log").read_text()
    finally:
        assert stop_process(insecure) == 0
    token = tmp_path / "token"
    token.write_text("t0k3n")
    exposed = start_service(
        tracker_argv(
            f"0.0.0.0:{port}", tmp_path / "wal", extra=["--receiver-token-file", str(token), "--insecure", "true"]
        ),
        port=port,
        log=tmp_path / "tracker2.log",
    )  # tokens without TLS beyond loopback: only with the loud opt-out
    try:
        import asyncio

        async def hello() -> None:
            async with TrackerClient(f"127.0.0.1:{port}", "receiver", auth_token="t0k3n") as client:
                assert "streams" in await client.status()

        asyncio.run(hello())
        assert "tokens travel in clear" in (tmp_path / "tracker2.log").read_text()
    finally:
        assert stop_process(exposed) == 0
