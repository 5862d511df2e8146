"""The pure maths of direct Kafka mode: how far each partition may advance in one batch.

This is Spark's ``DirectKafkaInputDStream.maxMessagesPerPartition`` and ``clamp`` (kafka-0-10,
3.x/4.x), kept free of Spark and Kafka so it can be tested exhaustively and reused by any shell.
Offsets are maps from ``(topic, partition)`` to an offset.

Where Sluice departs from Spark on purpose (DESIGN.md, "Direct Kafka mode"):

* the per-partition floor is ``ceil(min_rate_per_partition * batch seconds)``; Spark floors at
  the bare per-second rate and forgets the seconds;
* no lag at all gives ``None`` whatever the rate (Spark reaches ``None`` through a 0/0 NaN in
  the rate case; Python would raise, so it is special-cased before any division);
* with no positive rate only the caps apply, and a partition without a cap is unlimited (absent
  from the answer); Spark instead floors such a partition at its min rate, which would throttle
  an uncapped partition to one message per batch;
* the arithmetic is exact (fractions of the decimal values given): ``0.1 s * 100/s`` is 10, not
  9 after a float rounding error, and the truncated shares never add up to more than
  ``rate * seconds``;
* ``clamp`` never moves a partition backwards: a partition whose latest offset is behind the
  current one (a truncated or recreated topic) gets an empty range instead of a negative one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction

from sluice.block_info import OffsetRange
from sluice.errors import InvalidArgument, InvalidArgumentType, SluiceError

TopicPartition = tuple[str, int]
Offsets = Mapping[TopicPartition, int]
#: A limit for every partition, one per partition (missing partitions take the default), or a
#: function of the partition: Spark's ``PerPartitionConfig``.
PerPartitionLimit = float | int | Mapping[TopicPartition, float] | Callable[[TopicPartition], float]

__all__ = [
    "OffsetRange",
    "PerPartitionLimit",
    "TopicPartition",
    "clamp",
    "lag",
    "max_messages_per_partition",
    "offset_ranges",
]


class UnknownPartitions(SluiceError, KeyError):
    """Limits asked for partitions that have no current offset yet (add them first)."""


def _exact(value: float | int, what: str) -> Fraction:
    """The decimal value the user (or estimator) wrote, as an exact fraction.

    ``Fraction(0.1)`` is the binary float just above 0.1, so ``ceil(0.1 * 10)`` would be 2;
    going through ``repr`` recovers the shortest decimal that round-trips, i.e. 1/10.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentType(f"{what} must be a number, got {type(value).__name__}")
    if isinstance(value, int):
        return Fraction(value)
    if not math.isfinite(value):
        raise InvalidArgument(f"{what} must be a finite number, got {value!r}")
    return Fraction(repr(value))


def _per_partition(limit: PerPartitionLimit, name: str, default: float) -> Callable[[TopicPartition], Fraction]:
    """Turn a number, mapping or function into ``tp -> exact non-negative limit``."""
    if callable(limit):
        fn = limit
    elif isinstance(limit, Mapping):
        table = dict(limit)
        fn = lambda tp: table.get(tp, default)  # noqa: E731 - tiny adapter
    else:
        fn = lambda tp: limit  # noqa: E731
        _exact(limit, name)  # check once, even when there are no partitions

    def get(tp: TopicPartition) -> Fraction:
        value = _exact(fn(tp), f"{name} of {tp[0]}/{tp[1]}")
        if value < 0:
            raise InvalidArgument(f"{name} of {tp[0]}/{tp[1]} must be 0 or more (0 means none), got {fn(tp)!r}")
        return value

    return get


def lag(current_offsets: Offsets, latest_offsets: Offsets) -> dict[TopicPartition, int]:
    """Records each partition of ``latest_offsets`` is behind; a partition behind ``current`` has 0.

    Every partition of ``latest_offsets`` must have a current offset: the caller adds new
    partitions (at their earliest offset) before asking, as Spark's ``latestOffsets`` does.
    """
    missing = [tp for tp in latest_offsets if tp not in current_offsets]
    if missing:
        names = ", ".join(f"{t}/{p}" for t, p in sorted(missing))
        raise UnknownPartitions(
            f"no current offset for partition(s) {names}; add new partitions before computing limits"
        )
    return {tp: max(latest - current_offsets[tp], 0) for tp, latest in latest_offsets.items()}


def max_messages_per_partition(
    current_offsets: Offsets,
    latest_offsets: Offsets,
    rate: float | None,
    batch_interval_ms: int,
    max_rate_per_partition: PerPartitionLimit = 0,
    min_rate_per_partition: PerPartitionLimit = 1,
) -> dict[TopicPartition, int] | None:
    """How many messages each partition may contribute to one batch, or None for no limit.

    ``rate`` is the estimator's latest rate in records/s for the whole stream (None, NaN or
    <= 0 when there is none).  With a positive rate, each partition gets ``rate * lag / total
    lag``, capped at its ``max_rate_per_partition`` (0: no cap).  Without one, each capped
    partition gets its cap and the others are unlimited.  The per-second limit times the batch's
    seconds is truncated and floored at ``ceil(min_rate_per_partition * seconds)``, so a slow
    partition still advances in long batches.  No lag at all, or nothing to limit, gives None.
    """
    if isinstance(batch_interval_ms, bool) or not isinstance(batch_interval_ms, int) or batch_interval_ms <= 0:
        raise InvalidArgument(f"batch_interval_ms must be a positive integer, got {batch_interval_ms!r}")
    max_rate = _per_partition(max_rate_per_partition, "max_rate_per_partition", 0)
    min_rate = _per_partition(min_rate_per_partition, "min_rate_per_partition", 1)
    lags = lag(current_offsets, latest_offsets)
    total_lag = sum(lags.values())
    if total_lag == 0:
        return None  # Spark's 0/0 = NaN case: nothing to share, nothing to bound

    per_second: dict[TopicPartition, Fraction] = {}
    if rate is not None and isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0:
        exact_rate = _exact(rate, "rate")
        for tp, partition_lag in lags.items():
            share = Fraction(partition_lag, total_lag) * exact_rate
            cap = max_rate(tp)
            per_second[tp] = min(share, cap) if cap > 0 else share
    else:
        for tp in lags:
            cap = max_rate(tp)
            if cap > 0:
                per_second[tp] = cap
    if not per_second or sum(per_second.values()) <= 0:
        return None

    seconds = Fraction(batch_interval_ms, 1000)
    return {tp: max(math.floor(limit * seconds), math.ceil(min_rate(tp) * seconds)) for tp, limit in per_second.items()}


def clamp(
    current_offsets: Offsets,
    latest_offsets: Offsets,
    max_messages: Mapping[TopicPartition, int] | None,
) -> dict[TopicPartition, int]:
    """The until offset of each partition of ``latest``: ``min(current + max messages, latest)``.

    A partition absent from ``max_messages`` (or ``max_messages`` None) is not limited.  The
    answer is never below the current offset, so every range is empty or forward.
    """
    until: dict[TopicPartition, int] = {}
    for tp, latest in latest_offsets.items():
        current = current_offsets[tp]
        end = latest
        if max_messages is not None and tp in max_messages:
            end = min(current + max(max_messages[tp], 0), latest)
        until[tp] = max(end, current)
    return until


def offset_ranges(current_offsets: Offsets, until_offsets: Offsets) -> list[OffsetRange]:
    """One ``[current, until)`` range per partition of ``until_offsets``, in topic/partition order."""
    return [OffsetRange(tp[0], tp[1], current_offsets[tp], until) for tp, until in sorted(until_offsets.items())]


def total(ranges: Iterable[OffsetRange]) -> int:
    """Records the ranges cover."""
    return sum(r.count for r in ranges)
