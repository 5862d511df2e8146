"""The sources' keys: Kafka (receivers and direct mode), the socket and the generator."""

from __future__ import annotations

from sluice.config_key import (
    NON_NEGATIVE,
    NONE_AT_ZERO,
    PORT,
    POSITIVE,
    Key,
)
from sluice.config_schema.shared import is_weight

KEYS: tuple[Key, ...] = (
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
        "Spark's failOnDataLoss: stop when offsets to read left the log, the topic was deleted or a fetch "
        "skipped offsets (false: log it and go on from what the log holds)",
    ),
    Key(
        "kafka",
        "static_membership",
        bool,
        False,
        "receivers: join the group as static members (group.instance.id = the receiver id), so a receiver "
        "restarted within the session timeout gets its partitions back without a rebalance; needs a stable "
        "receiver.receiver_id",
    ),
    Key(
        "kafka",
        "gap_wait_ms",
        int,
        0,
        "receivers: how long offsets a fetch skips at its position (below the high watermark) are fetched "
        "again before they are taken as missing (a warning, or a stop under fail_on_data_loss); for brokers "
        "that show a batch before an earlier one (tansu on S3 under store faults); 0: at once, as Spark",
        **NON_NEGATIVE,
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
        check=lambda v: all(is_weight(w) for w in v.values()),
        allowed="a table of topic = a number above 0",
    ),
    Key("kafka", "max_retries", int, 1, "direct mode: retries when asking for the latest offsets", **NONE_AT_ZERO),
    Key(
        "kafka",
        "client",
        dict,
        {},
        "extra aiokafka settings (TLS, SASL, fetch sizes, isolation_level), passed on unchanged; a credential "
        "(sasl_plain_password, ssl_password) may instead name a file (<key>_file) or an "
        "environment variable (<key>_env)",
    ),
    Key("socket", "host", str, "127.0.0.1", "socket source: host to connect to"),
    Key("socket", "port", int, 9999, "socket source: port to connect to", **PORT),
    Key("generator", "rate", float, 0.0, "generator source: records/s offered (0: as fast as allowed)", **NON_NEGATIVE),
    Key("generator", "batch_size", int, 100, "generator source: records per store_many", **POSITIVE),
    Key("generator", "words_per_record", int, 3, "generator source: words after the sequence number", **NON_NEGATIVE),
    Key("generator", "total", int, 0, "generator source: stop after this many records (0: never)", **NON_NEGATIVE),
)
