"""The receiver workers' keys (``[receiver]``)."""

from __future__ import annotations

from sluice.config_key import (
    HOST_PORTS,
    NON_NEGATIVE,
    NONE_AT_ZERO,
    PORT,
    POSITIVE,
    Key,
)
from sluice.config_schema.shared import (
    DEFAULT_BLOCK_STORE,
    metrics_addr_key,
    metrics_web_config_key,
    tracker_client_keys,
)

KEYS: tuple[Key, ...] = (
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
        "block_lead_ms",
        int,
        50,
        "cut each block this long before its interval ends, so the block of an interval ending on a batch "
        "boundary is stored and reported before that batch is allocated (at most half of block_interval_ms; "
        "0: on the end, as Spark)",
        **NON_NEGATIVE,
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
        "orphan_grace_ms",
        int,
        600_000,
        "delete a block file an earlier run of this receiver stored and never reported once it is this old; "
        "looked for at the start and this often (0: never)",
        **NON_NEGATIVE,
    ),
    Key(
        "receiver",
        "stop_timeout_ms",
        int,
        30_000,
        "a stop ends within this, acknowledged or not (unacknowledged offsets stay uncommitted)",
        **POSITIVE,
    ),
    Key("receiver", "metrics_port", int, 0, "Prometheus metrics port (0: no metrics server)", **PORT),
    metrics_addr_key("receiver"),
    metrics_web_config_key("receiver"),
    *tracker_client_keys("receiver"),
    Key("receiver", "receiver_id", str, "", "receiver id prefix; ids are <prefix>-<n> (default: host-pid)"),
    Key(
        "block_store",
        "options",
        dict,
        {},
        "options of a non-file block store, passed to fsspec (endpoint_url, key, secret, ...)",
    ),
)
