"""Rate control: backpressure and the estimators (``[backpressure]``, ``[estimator]``)."""

from __future__ import annotations

import math

from sluice.config_key import (
    NON_NEGATIVE,
    NONE_AT_ZERO,
    POSITIVE,
    ConfigError,
    Key,
)
from sluice.config_schema.shared import PID_DEFAULTS

TARGETS = ("throughput", "latency")

KEYS: tuple[Key, ...] = (
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
        "backpressure",
        "target",
        str,
        "throughput",
        "what the rate is for: throughput (batches fill the interval, Spark's behaviour) or latency (batches "
        "sized so records' end-to-end latency stays under target_latency_ms)",
        choices=TARGETS,
    ),
    Key(
        "backpressure",
        "target_latency_ms",
        int,
        2000,
        "with target = latency: the end-to-end latency of records (p99) to stay under; more than the batch "
        "interval plus the receivers' block interval",
        **dict(POSITIVE, allowed="an integer above 0"),
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
)


def check_target(target: str, target_latency_ms: int, batch_interval_ms: int, block_interval_ms: float) -> None:
    """Refuse a latency target a record's wait for its batch alone exceeds, naming the smallest allowed.

    A record waits up to one batch interval, plus one block interval in receiver mode (0 in direct
    mode), before its batch starts: a target not above that leaves no time to process it.
    """
    smallest = math.floor(batch_interval_ms + block_interval_ms) + 1
    if target == "latency" and target_latency_ms < smallest:
        raise ConfigError(
            f"backpressure.target_latency_ms = {target_latency_ms} is not allowed with backpressure.target = "
            f"'latency': expected at least {smallest} (more than driver.batch_interval_ms {batch_interval_ms} "
            f"+ the block interval {block_interval_ms:g}, which a record may wait before its batch starts)"
        )
