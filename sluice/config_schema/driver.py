"""The driver's keys (``[driver]``)."""

from __future__ import annotations

from sluice.config_key import (
    HOST_NAMES,
    HOST_PORTS,
    NON_NEGATIVE,
    NONE_AT_ZERO,
    PORT,
    POSITIVE,
    Key,
)
from sluice.config_schema.shared import (
    DEFAULT_BLOCK_STORE,
    Trigger,
    metrics_addr_key,
    metrics_web_config_key,
    tracker_client_keys,
)

KEYS: tuple[Key, ...] = (
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
    Key(
        "driver",
        "min_batch_partitions",
        int,
        0,
        "receiver batches: a batch of fewer blocks than this has its blocks of 10,000 records or more read in "
        "slices of at least 5,000, so a backlog read into one block still runs on every core (0: the Spark "
        "context's default parallelism; 1: one partition per block, as Spark's BlockRDD)",
        **NON_NEGATIVE,
    ),
    Key(
        "driver",
        "bad_records",
        str,
        "fail",
        "a Kafka record that cannot be decoded: fail its batch naming its topic, partition and offset; skip "
        "it (counted in sluice_bad_records_total, logged once per block or direct-mode range); or keep it "
        "byte for byte in driver.dead_letter and go on",
        choices=("fail", "skip", "dead-letter"),
    ),
    Key(
        "driver",
        "dead_letter",
        str,
        "",
        "driver.bad_records = dead-letter: the block store URL (a scheme driver.block_store takes) where each "
        "block's or direct-mode range's records that cannot be decoded are written, one file per block or range",
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
        "ui_allowed_hosts",
        str,
        "",
        "names the streaming page answers in a request's Host besides loopback and driver.ui_host, "
        "comma-separated (the names it is opened by from other hosts; any other name is refused, against "
        "DNS rebinding)",
        **HOST_NAMES,
    ),
    metrics_addr_key("driver"),
    metrics_web_config_key("driver"),
    *tracker_client_keys("driver"),
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
