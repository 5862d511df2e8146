"""The tracker service's keys (``[tracker]``)."""

from __future__ import annotations

from sluice.config_key import (
    HOST_PORT,
    PORT,
    POSITIVE,
    Key,
)
from sluice.config_schema.shared import DEFAULT_BLOCK_STORE, is_store_urls, is_stream_id, metrics_web_config_key

KEYS: tuple[Key, ...] = (
    Key("tracker", "listen", str, "127.0.0.1:7100", "address the tracker serves RPC on", **HOST_PORT),
    Key(
        "tracker",
        "wal_dir",
        str,
        "./sluice-wal",
        "directory of the tracker's write-ahead log, or a log shared by a leader and standbys: "
        "s3://bucket/prefix or file:///path on a shared filesystem",
    ),
    Key(
        "tracker",
        "advertise",
        str,
        "",
        "the HOST:PORT clients reach this tracker at, named to them by standbys (empty: tracker.listen)",
    ),
    Key(
        "tracker",
        "lease_ms",
        int,
        6_000,
        "a standby takes over a shared log when its leader has not renewed the lease for this long",
        **POSITIVE,
    ),
    Key("tracker", "standby_poll_ms", int, 500, "how often a standby reads the shared log and lease", **POSITIVE),
    Key(
        "tracker",
        "log_outage_ms",
        int,
        60_000,
        "a shared log's write is retried this long while the store does not answer, then the tracker stops",
        **POSITIVE,
    ),
    Key("tracker", "metrics_port", int, 0, "Prometheus metrics port (0: no metrics server)", **PORT),
    metrics_web_config_key("tracker"),
    Key("tracker", "auth_token_file", str, "", "file holding a full-access token (every role) for hello"),
    Key(
        "tracker",
        "receiver_token_file",
        str,
        "",
        "file holding a token that gives the receiver role only (register, heartbeat, add_block, "
        "report_error, deregister, status)",
    ),
    Key(
        "tracker",
        "driver_token_file",
        str,
        "",
        "file holding a token that gives the driver role only (allocate_blocks, get_blocks_of_batch, "
        "batch_completed, publish_rate, status)",
    ),
    Key("tracker", "tls_cert", str, "", "TLS certificate (PEM) for the RPC listener"),
    Key("tracker", "tls_key", str, "", "TLS private key (PEM) for the RPC listener"),
    Key(
        "tracker",
        "tls_client_ca",
        str,
        "",
        "CA (PEM) whose client certificates are required; a certificate's common name (receiver, driver, "
        "admin) is its role",
    ),
    Key(
        "tracker",
        "insecure",
        bool,
        False,
        "serve a non-loopback address without any token or client CA, or with tokens but no TLS (refused "
        "otherwise; logged as INSECURE at start)",
    ),
    Key(
        "tracker",
        "block_store",
        str,
        DEFAULT_BLOCK_STORE,
        "block store URL(s), comma-separated, that block locations must lie in: add_block refuses any "
        "other (set it to the receivers' receiver.block_store)",
        check=is_store_urls,
        allowed="one or more URLs, comma-separated, whose schemes name registered block stores",
    ),
    Key(
        "tracker",
        "receiver_tokens",
        dict,
        {},
        "receiver tokens bound to streams: {token file = [stream ids]}; each may serve those streams only",
        check=lambda v: all(
            isinstance(k, str) and k and isinstance(ids, list) and ids and all(is_stream_id(i) for i in ids)
            for k, ids in v.items()
        ),
        allowed="a table of token file = [stream ids from 0 to 2147483647], each list not empty",
    ),
    Key(
        "tracker",
        "max_connections",
        int,
        1024,
        "authenticated connections beyond this are closed at once (lowered to fit the open-files limit)",
        **POSITIVE,
    ),
    Key("tracker", "max_pending_hellos", int, 64, "connections without hello beyond this close the oldest", **POSITIVE),
    Key("tracker", "frame_timeout_ms", int, 30_000, "a frame started and not finished after this closes", **POSITIVE),
    Key(
        "tracker", "max_receivers", int, 10_000, "registrations of new receiver ids beyond this are refused", **POSITIVE
    ),
    Key(
        "tracker", "max_streams", int, 1_024, "streams beyond this are refused (registration of a new one)", **POSITIVE
    ),
    Key("tracker", "max_ranges_per_block", int, 1_024, "add_block with more offset ranges is refused", **POSITIVE),
    Key(
        "tracker",
        "max_partitions_per_stream",
        int,
        65_536,
        "add_block naming a new topic partition of a stream past this many is refused",
        **POSITIVE,
    ),
    Key(
        "tracker",
        "max_queued_blocks",
        int,
        100_000,
        "per stream: past this many unallocated blocks add_block answers busy (the receiver waits)",
        **POSITIVE,
    ),
    Key(
        "tracker",
        "max_queued_records",
        int,
        1_000_000_000,
        "per stream: past this many unallocated records add_block answers busy (the receiver waits)",
        **POSITIVE,
    ),
    Key(
        "tracker",
        "error_reports_per_minute",
        int,
        60,
        "report_error lines logged per receiver per minute; the rest are counted only",
        **POSITIVE,
    ),
    Key("tracker", "hello_timeout_ms", int, 10_000, "a connection without hello after this is closed", **POSITIVE),
    Key("tracker", "idle_timeout_ms", int, 600_000, "a connection silent this long is closed", **POSITIVE),
    Key(
        "tracker",
        "max_batch_ahead_ms",
        int,
        86_400_000,
        "allocate_blocks refuses a batch time further than this past the tracker's clock",
        **POSITIVE,
    ),
    Key(
        "tracker",
        "max_frame_bytes",
        int,
        1 << 20,
        "largest RPC frame accepted",
        check=lambda v: 1024 <= v <= 1 << 30,
        allowed="an integer from 1024 to 1073741824",
    ),
    Key("tracker", "liveness_timeout_ms", int, 10_000, "a receiver silent this long is dead", **POSITIVE),
    Key(
        "tracker",
        "rate_split",
        str,
        "equal",
        "how a stream's rate is shared among its receivers",
        choices=("equal", "lag"),
    ),
    Key("tracker", "remember_ms", int, 60_000, "completed batches older than this are cleaned up", **POSITIVE),
    Key("tracker", "wal_segment_bytes", int, 64 << 20, "roll a WAL segment past this size", **POSITIVE),
    Key("tracker", "wal_segment_ms", int, 60_000, "roll a WAL segment past this age", **POSITIVE),
    Key(
        "tracker",
        "wal_piece_bytes",
        int,
        16 << 20,
        "a snapshot is written and read as pieces of at most this many bytes (no limit on its total)",
        **POSITIVE,
    ),
)
