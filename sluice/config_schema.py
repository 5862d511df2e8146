"""The configuration schema: every key of every Sluice service, declared once.

Each :class:`~sluice.config_key.Key` names its section, flag, type, default and what is allowed;
:mod:`sluice.config` reads TOML files, the environment and flags against this list, the typed
settings (:mod:`sluice.settings`) take their defaults from it, and the configuration reference in
docs/ is generated from it.
"""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import urlparse

from sluice.config_key import (
    HOST_PORT,
    HOST_PORTS,
    NON_NEGATIVE,
    NONE_AT_ZERO,
    PORT,
    POSITIVE,
    Key,
)
from sluice.logs import LEVELS
from sluice.plugins import registry

# Spark's spark.streaming.backpressure.pid.{proportional,integral,derived,minRate} defaults: the
# estimator.pid.* keys, the pid factory and PIDRateEstimator all take them from here.
PID_DEFAULTS: dict[str, float] = {"proportional": 1.0, "integral": 0.2, "derived": 0.0, "min_rate": 100.0}

# Where receivers write blocks, and so the one store the tracker and the driver accept by default:
# each service resolves the relative path against its own working directory when it starts.
DEFAULT_BLOCK_STORE = "file://./sluice-blocks"


def _store_urls(value: str) -> bool:
    """One or more URLs, comma-separated, each of a registered block store's scheme."""
    urls = [url.strip() for url in value.split(",") if url.strip()]
    stores = registry("sluice_register_block_stores").available()
    return bool(urls) and all(urlparse(url).scheme in stores for url in urls)


def _weight(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def _stream_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**31 - 1


class Trigger(StrEnum):
    """When batches start (``driver.trigger``); :mod:`sluice.spark_driver.triggers` has one policy each."""

    FIXED = "fixed"
    PROCESSING_TIME = "processing-time"
    ONCE = "once"
    AVAILABLE_NOW = "available-now"


SCHEMA: tuple[Key, ...] = (
    # every service
    Key(
        "log",
        "level",
        str,
        "INFO",
        "lowest level of the log lines a service writes",
        check=lambda v: v.upper() in LEVELS,
        allowed="one of " + ", ".join(LEVELS) + " (any case)",
    ),
    # tracker service
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
    Key(
        "tracker",
        "metrics_web_config",
        str,
        "",
        "exporter-toolkit web configuration file (YAML): TLS and basic auth on the metrics port (empty: plain HTTP)",
    ),
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
        check=_store_urls,
        allowed="one or more URLs, comma-separated, whose schemes name registered block stores",
    ),
    Key(
        "tracker",
        "receiver_tokens",
        dict,
        {},
        "receiver tokens bound to streams: {token file = [stream ids]}; each may serve those streams only",
        check=lambda v: all(
            isinstance(k, str) and k and isinstance(ids, list) and ids and all(_stream_id(i) for i in ids)
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
    # receiver workers
    Key(
        "receiver",
        "tracker",
        str,
        "127.0.0.1:7100",
        "tracker address, or a leader and its standbys separated by commas",
        **HOST_PORTS,
    ),
    Key("receiver", "stream_id", int, 0, "stream the receivers feed", **NON_NEGATIVE),
    Key("receiver", "source", str, "kafka", "where records come from", plugins="sluice_register_sources"),
    Key("receiver", "source_options", dict, {}, "options passed to a plugin source"),
    Key("receiver", "receivers", int, 1, "receivers this worker runs as asyncio tasks", **POSITIVE),
    Key(
        "receiver",
        "max_rate",
        float,
        0.0,
        "records/s cap per receiver (spark.streaming.receiver.maxRate)",
        **NONE_AT_ZERO,
    ),
    Key(
        "receiver", "block_interval_ms", int, 200, "cut a block this often (spark.streaming.blockInterval)", **POSITIVE
    ),
    Key(
        "receiver",
        "block_queue_size",
        int,
        10,
        "blocks waiting to be pushed (spark.streaming.blockQueueSize)",
        **POSITIVE,
    ),
    Key(
        "receiver",
        "max_block_records",
        int,
        100_000,
        "store() waits when the buffer holds this many (Kafka records: only if max_block_bytes is 0)",
        **POSITIVE,
    ),
    Key(
        "receiver",
        "max_block_bytes",
        int,
        64 << 20,
        "store() waits when the buffer holds this many bytes (encoded Kafka records, text or bytes records)",
        **NONE_AT_ZERO,
    ),
    Key(
        "receiver",
        "block_store",
        str,
        DEFAULT_BLOCK_STORE,
        "URL of the block store",
        plugins="sluice_register_block_stores",
        scheme=True,
    ),
    Key("receiver", "restart_delay_ms", int, 2000, "wait before restarting a failed receiver", **NON_NEGATIVE),
    Key("receiver", "heartbeat_interval_ms", int, 2000, "heartbeat to the tracker this often", **POSITIVE),
    Key(
        "receiver",
        "stop_timeout_ms",
        int,
        30_000,
        "a stop ends within this, acknowledged or not (unacknowledged offsets stay uncommitted)",
        **POSITIVE,
    ),
    Key("receiver", "metrics_port", int, 0, "Prometheus metrics port (0: no metrics server)", **PORT),
    Key(
        "receiver",
        "metrics_addr",
        str,
        "127.0.0.1",
        "address the metrics port binds (0.0.0.0: every interface; across a network, give it a metrics_web_config)",
    ),
    Key(
        "receiver",
        "metrics_web_config",
        str,
        "",
        "exporter-toolkit web configuration file (YAML): TLS and basic auth on the metrics port (empty: plain HTTP)",
    ),
    Key("receiver", "auth_token_file", str, "", "file holding the tracker's auth token"),
    Key("receiver", "tls_ca", str, "", "CA (PEM) that signed the tracker's certificate: TLS to the tracker"),
    Key("receiver", "tls_cert", str, "", "client certificate (PEM) shown to the tracker"),
    Key("receiver", "tls_key", str, "", "client certificate's private key (PEM)"),
    Key("receiver", "receiver_id", str, "", "receiver id prefix; ids are <prefix>-<n> (default: host-pid)"),
    Key(
        "block_store",
        "options",
        dict,
        {},
        "options of a non-file block store, passed to fsspec (endpoint_url, key, secret, ...)",
    ),
    # sources
    Key("kafka", "bootstrap_servers", str, "127.0.0.1:9092", "Kafka bootstrap servers", flags=("--bootstrap-servers",)),
    Key("kafka", "topic", str, "sluice", "topic(s) to read, comma-separated", flags=("--topic",)),
    Key("kafka", "group_id", str, "sluice", "consumer group", flags=("--group-id",)),
    Key(
        "kafka",
        "topic_pattern",
        str,
        "",
        "Spark's subscribePattern: read every topic whose whole name matches this regular expression "
        "(topics created later too) instead of kafka.topic",
    ),
    Key(
        "kafka",
        "fail_on_data_loss",
        bool,
        False,
        "Spark's failOnDataLoss: stop when offsets to read left the log or the topic was deleted "
        "(false: log it and go on from what the log holds)",
    ),
    Key(
        "kafka",
        "auto_offset_reset",
        str,
        "earliest",
        "where a group without commits starts",
        choices=("earliest", "latest"),
    ),
    Key(
        "kafka",
        "max_rate_per_partition",
        float,
        0.0,
        "direct mode: records/s cap per partition (0: none)",
        **NONE_AT_ZERO,
    ),
    Key("kafka", "min_rate_per_partition", float, 1.0, "direct mode: records/s floor per partition", **NONE_AT_ZERO),
    Key(
        "kafka",
        "max_bytes_per_batch",
        int,
        0,
        "direct mode: bytes (keys, values, headers) one batch may read, through a sample of each partition's "
        "next records (0: none)",
        **NONE_AT_ZERO,
    ),
    Key(
        "kafka",
        "limits_count",
        str,
        "offsets",
        "direct mode: what the rate counts, offsets (as Spark) or records; records reads a few at each "
        "partition's offset per batch to learn how many offsets a record takes (transaction markers, compaction)",
        choices=("offsets", "records"),
    ),
    Key(
        "kafka",
        "topic_weights",
        dict,
        {},
        "direct mode: a batch's records shared among topics by these weights ({topic = weight}, 1 for a topic "
        "not named), what one topic leaves going to the others; empty: shared by lag, as Spark does",
        check=lambda v: all(_weight(w) for w in v.values()),
        allowed="a table of topic = a number above 0",
    ),
    Key("kafka", "max_retries", int, 1, "direct mode: retries when asking for the latest offsets", **NONE_AT_ZERO),
    Key(
        "kafka",
        "client",
        dict,
        {},
        "extra aiokafka settings (TLS, SASL, fetch sizes, isolation_level), passed on unchanged",
    ),
    Key("socket", "host", str, "127.0.0.1", "socket source: host to connect to"),
    Key("socket", "port", int, 9999, "socket source: port to connect to", **PORT),
    Key("generator", "rate", float, 0.0, "generator source: records/s offered (0: as fast as allowed)", **NON_NEGATIVE),
    Key("generator", "batch_size", int, 100, "generator source: records per store_many", **POSITIVE),
    Key("generator", "words_per_record", int, 3, "generator source: words after the sequence number", **NON_NEGATIVE),
    Key("generator", "total", int, 0, "generator source: stop after this many records (0: never)", **NON_NEGATIVE),
    # rate control
    Key("backpressure", "enabled", bool, True, "adapt the receivers' rate to the processing rate"),
    Key(
        "backpressure",
        "initial_rate",
        float,
        0.0,
        "rate before the first estimate (0: none); receivers apply it from their start",
        flags=("--initial-rate",),
        **NONE_AT_ZERO,
    ),
    Key(
        "backpressure",
        "signal_interval_ms",
        int,
        200,
        "how often an estimator that opts in gets in-flight signals (0: never)",
        **NONE_AT_ZERO,
    ),
    Key(
        "backpressure",
        "resume_rate",
        bool,
        True,
        "the driver starts from the rate the tracker remembers (the last one published) when there is "
        "one; false: initial_rate wins",
        flags=("--resume-rate",),
    ),
    Key(
        "backpressure",
        "slow_start",
        bool,
        True,
        "until the estimator's first estimate, probe from a small first batch (initial_rate / 16, at least "
        "20 x the minimum rate) doubling while batches finish inside the interval, up to initial_rate; "
        "false: trust initial_rate from the first batch, as Spark does",
        flags=("--slow-start",),
    ),
    Key(
        "estimator",
        "name",
        str,
        "pid",
        "rate estimator (built-in or plugin): pid (Spark's PIDRateEstimator, bit for bit), adaptive "
        "(Sluice's controller), constant, or a plugin's",
        flags=("--estimator",),
        plugins="sluice_register_estimators",
    ),
    Key("estimator", "pid.proportional", float, PID_DEFAULTS["proportional"], "PID proportional gain", **NON_NEGATIVE),
    Key("estimator", "pid.integral", float, PID_DEFAULTS["integral"], "PID integral gain", **NON_NEGATIVE),
    Key("estimator", "pid.derived", float, PID_DEFAULTS["derived"], "PID derivative gain", **NON_NEGATIVE),
    Key("estimator", "pid.min_rate", float, PID_DEFAULTS["min_rate"], "PID lowest rate", **POSITIVE),
    Key("estimator", "options", dict, {}, "options passed to a non-PID estimator"),
    # driver
    Key(
        "driver",
        "tracker",
        str,
        "127.0.0.1:7100",
        "tracker address, or a leader and its standbys separated by commas",
        **HOST_PORTS,
    ),
    Key("driver", "app", str, "", "the batch function, as module:function"),
    Key("driver", "master", str, "local[*]", "Spark master URL"),
    Key("driver", "source", str, "receivers", "where batches come from", choices=("receivers", "direct-kafka")),
    Key("driver", "batch_interval_ms", int, 1000, "batch interval", **POSITIVE),
    Key("driver", "trigger", str, Trigger.FIXED.value, "when batches start", choices=tuple(t.value for t in Trigger)),
    Key("driver", "concurrent_jobs", int, 1, "batches processed at once (spark.streaming.concurrentJobs)", **POSITIVE),
    Key("driver", "max_batch_retries", int, 2, "retries of a failed batch", **NONE_AT_ZERO),
    Key("driver", "on_batch_failure", str, "stop", "after the retries", choices=("stop", "skip")),
    Key(
        "driver",
        "max_batch_partitions",
        int,
        0,
        "receiver batches: blocks grouped in order into at most this many partitions, so a batch of many small "
        "blocks runs a few tasks instead of one per block (0: one partition per block, as Spark's BlockRDD)",
        **NONE_AT_ZERO,
    ),
    Key("driver", "checkpoint_dir", str, "./sluice-checkpoint", "driver checkpoint (direct mode offsets)"),
    Key(
        "driver",
        "stop_timeout_ms",
        int,
        30_000,
        "a graceful stop ends within this; batches still running then are cancelled and re-run after a restart",
        **POSITIVE,
    ),
    Key("driver", "metrics_port", int, 0, "Prometheus metrics port (0: no metrics server)", **PORT),
    Key("driver", "ui_port", int, 4050, "port of the streaming page and its JSON API (0: no page)", **PORT),
    Key(
        "driver",
        "ui_host",
        str,
        "127.0.0.1",
        "address the streaming page listens on (loopback: this host only; 0.0.0.0: every interface)",
    ),
    Key(
        "driver",
        "metrics_addr",
        str,
        "127.0.0.1",
        "address the metrics port binds (0.0.0.0: every interface; across a network, give it a metrics_web_config)",
    ),
    Key(
        "driver",
        "metrics_web_config",
        str,
        "",
        "exporter-toolkit web configuration file (YAML): TLS and basic auth on the metrics port (empty: plain HTTP)",
    ),
    Key("driver", "auth_token_file", str, "", "file holding the tracker's auth token"),
    Key("driver", "tls_ca", str, "", "CA (PEM) that signed the tracker's certificate: TLS to the tracker"),
    Key("driver", "tls_cert", str, "", "client certificate (PEM) shown to the tracker"),
    Key("driver", "tls_key", str, "", "client certificate's private key (PEM)"),
    Key(
        "driver",
        "block_store",
        str,
        DEFAULT_BLOCK_STORE,
        "the block store blocks are read from and deleted in; a location outside it is refused (set it to "
        "the receivers' receiver.block_store)",
        plugins="sluice_register_block_stores",
        scheme=True,
    ),
)

SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(k.section for k in SCHEMA))
