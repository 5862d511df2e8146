"""``sluice-tracker``: run the tracker service.

SIGTERM or SIGINT stops within 2 s: no new connections, what was received is answered, the log is
flushed; a second signal changes nothing (the flush is what makes the log whole).
Exit codes: 0 after SIGTERM/SIGINT; 1 when the write-ahead log is damaged at start (the message
names the file and offset), a write to it fails while running, or a standby meets an object of the
shared log it cannot apply (the message names it); 2 for a bad configuration value;
3 when another tracker took the shared log over (this one was deposed: it acknowledges nothing more).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
import sys
from collections.abc import Sequence

from sluice.config import ConfigError, parse_args, read_token
from sluice.logs import setup_logging
from sluice.metrics_web_config import WebConfig
from sluice.metrics_web_config import load as load_web_config
from sluice.settings import TrackerSettings
from sluice.tracker.log.lease import request_timeout_s
from sluice.tracker.log.protocol import Deposed
from sluice.tracker.log.store import is_object_url, open_store
from sluice.tracker.log.wal import WALCorruption
from sluice.tracker.server import metrics
from sluice.tracker.server.auth import Credentials
from sluice.tracker.server.recovery import open_service
from sluice.tracker.server.server import TrackerServer
from sluice.tracker.server.service import TrackerService
from sluice.tracker.server.standby import SharedLog
from sluice.tracker.wire.protocol import Limits
from sluice.tracker.wire.tls import check_exposure, server_context

log = logging.getLogger("sluice.tracker.server.cli")  # not __name__: run as -m it is __main__
DEPOSED_GRACE_S = 2.0


def _extend(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--standby",
        action="store_true",
        help="follow the shared log (tracker.wal_dir a URL) and take over when the leader's lease lapses",
    )
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="do not fsync the write-ahead log (tests and benchmarks of the non-durable peer only)",
    )


def credentials(config: dict) -> Credentials:
    """The tokens and client-certificate roles the tracker accepts (ConfigError when unreadable)."""
    try:
        return Credentials.from_tokens(
            read_token(config["auth_token_file"]),
            read_token(config["receiver_token_file"]),
            read_token(config["driver_token_file"]),
            cert_roles=bool(config["tls_client_ca"]),
            receiver_tokens={
                token: frozenset(streams)
                for path, streams in config["receiver_tokens"].items()
                if (token := read_token(path))
            },
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


async def serve(
    config: dict,
    settings: TrackerSettings,
    creds: Credentials,
    tls: ssl.SSLContext | None,
    fsync: bool = True,
    standby: bool = False,
    metrics_web: WebConfig | None = None,
) -> int:

    stores = [url.strip() for url in config["block_store"].split(",") if url.strip()]
    shared = None
    try:
        if is_object_url(config["wal_dir"]):
            service = TrackerService(settings=settings, block_stores=stores)
            shared = SharedLog(
                open_store(config["wal_dir"]),
                service,
                config["advertise"] or config["listen"],
                settings,
                lease_store=open_store(config["wal_dir"], request_timeout_s(settings.lease_ms)),
            )
            # a log without a lease is led at once; any other waits, as a standby, to lead (standby.py)
            commit = None if standby else await asyncio.get_running_loop().run_in_executor(None, shared.lead_if_free)
        elif standby:
            log.error("cannot start: --standby needs a shared log, tracker.wal_dir = s3://... or file:///...")
            return 2
        else:
            service, commit = open_service(config["wal_dir"], settings=settings, fsync=fsync, block_stores=stores)
    except WALCorruption as exc:
        log.error("cannot start: the write-ahead log is damaged: %s", exc)
        return 1
    except (OSError, ValueError) as exc:  # a store that does not answer, a URL no log can live in
        log.error("cannot start: the write-ahead log in %s cannot be opened: %s", config["wal_dir"], exc)
        return 1
    server = TrackerServer(
        service,
        commit,
        credentials=creds,
        # no request holds a longer array than a block's ranges (max_records: 4096): a longer one is
        # refused while decoding, before 60,000 ranges become 60,000 objects
        limits=Limits(max_frame=config["max_frame_bytes"], max_array_len=max(4096, settings.max_ranges_per_block)),
        liveness_interval_s=min(1.0, config["liveness_timeout_ms"] / 4000),
        max_connections=settings.max_connections,
        max_pending_hellos=settings.max_pending_hellos,
        hello_timeout_s=config["hello_timeout_ms"] / 1000,
        idle_timeout_s=config["idle_timeout_ms"] / 1000,
        frame_timeout_s=settings.frame_timeout_ms / 1000,
    )
    # Handlers before the port opens: a peer that sees the port may send SIGTERM at once.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host, _, port = config["listen"].rpartition(":")
    try:
        await server.start(host.strip("[]"), int(port), ssl=tls)
    except OSError as exc:
        log.error("cannot listen on %s: %s", config["listen"], exc)
        return 1
    if config["metrics_port"]:
        metrics.serve(config["metrics_port"], host.strip("[]") or "127.0.0.1", metrics_web)
    log.info(
        "tracker listening on %s (wal %s, auth %s, tls %s, block locations only inside %s)",
        config["listen"],
        config["wal_dir"],
        "off (every peer has every role)" if creds.open else "on",
        "on" if tls else "off",
        " or ".join(service.block_stores),
    )
    if shared is not None:
        shared.run(server, following=commit is None, eager=not standby)
    stop_wait = loop.create_task(stop.wait())
    fail_wait = loop.create_task(server.failed.wait())
    await asyncio.wait([stop_wait, fail_wait], return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    fail_wait.cancel()
    if isinstance(server.failure, Deposed):
        # Nothing more is acknowledged; for a moment every request is answered not_leader, naming
        # the new leader, so clients holding a connection here move at once.
        log.error("stopping: deposed, another tracker leads the log: %s", server.failure)
        await asyncio.sleep(DEPOSED_GRACE_S)
        return 3
    if server.failure is not None:
        log.error("stopping: the write-ahead log failed: %s", server.failure)
        return 1
    log.info("stopping: no new connections, answering in-flight requests, flushing the log")
    # A second signal changes nothing, up to the exit itself: closing the loop resets the handlers
    # to the default action, which would end the process with the signal after a clean stop.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    await server.stop()
    log.info("tracker stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    config, args = parse_args(
        "sluice-tracker",
        "Sluice tracker: ReceivedBlockTracker, receiver registry, WAL",
        sections=("tracker", "log"),
        home="tracker",
        argv=argv,
        extend=_extend,
    )
    setup_logging(config["log.level"])
    section = config.section("tracker")
    try:
        creds = credentials(section)
        tls = server_context(section["tls_cert"], section["tls_key"], section["tls_client_ca"])
        metrics_web = load_web_config(section["metrics_web_config"], "tracker.metrics_web_config")
        check_exposure(
            section["listen"].rpartition(":")[0],
            has_credentials=not creds.open,
            insecure=section["insecure"],
            tls=tls is not None,
        )
    except ConfigError as exc:
        print(f"sluice-tracker: {exc}", file=sys.stderr)
        return 2
    settings = TrackerSettings.from_config(config)
    return asyncio.run(
        serve(section, settings, creds, tls, fsync=not args.no_fsync, standby=args.standby, metrics_web=metrics_web)
    )


if __name__ == "__main__":
    sys.exit(main())
