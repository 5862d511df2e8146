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
    "held_per_offset",
    "offset_ranges",
    "offsets_holding",
    "topic_shares",
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


def topic_shares(need: Mapping[str, Fraction], budget: Fraction, weights: Mapping[str, float]) -> dict[str, Fraction]:
    """``budget`` records shared among topics by weight (1 for a topic ``weights`` does not name),
    water-filling: a topic that ``need``s less than its share takes only what it needs and the
    rest goes to the others by their weights.  So one topic's backlog cannot starve another,
    whatever their lags (Spark shares by lag alone, which gives a busy topic nearly everything).
    """
    weight = {t: _exact(weights.get(t, 1), f"the weight of topic {t}") for t in need}
    bad = sorted(t for t, w in weight.items() if w <= 0)
    if bad:
        raise InvalidArgument(f"topic weights must be above 0, got {', '.join(f'{t}={weights[t]!r}' for t in bad)}")
    shares = {t: Fraction(0) for t in need}
    active = {t for t, n in need.items() if n > 0}
    left = budget
    while active:
        total = sum(weight[t] for t in active)
        fair = {t: left * weight[t] / total for t in active}
        sated = {t for t in active if need[t] <= fair[t]}
        if not sated:
            shares.update(fair)
            break
        for t in sated:
            shares[t] = need[t]
            left -= need[t]
        active -= sated
    return shares


def held_per_offset(per_offset: Mapping[TopicPartition, float], lags: Mapping[TopicPartition, int]) -> float | None:
    """What an offset holds on average (records or bytes), weighted by lag; None without a sample.

    ``per_offset`` is what each partition holds per offset, sampled at its current offset
    (:mod:`~sluice.spark_driver.direct.sampling`): 1 record per offset on a dense log, fewer
    where a compacted or transactional log has gaps.  Weighted by lag because bounds are shared
    by lag: every partition gives the same fraction of its lag.
    """
    lagging = {tp: n for tp, n in lags.items() if n > 0 and tp in per_offset}
    held = sum(n * per_offset[tp] for tp, n in lagging.items())
    return held / sum(lagging.values()) if held > 0 else None


def offsets_holding(amount: int, per_offset: Mapping[TopicPartition, float], lags: Mapping[TopicPartition, int]) -> int:
    """How many offsets, shared by lag, hold ``amount`` records or bytes (:func:`held_per_offset`),
    so the batch holds ``amount`` as far as the samples are typical.  At least 1, so one record
    larger than a byte bound still goes through alone."""
    mean = held_per_offset(per_offset, lags)
    return max(1, amount if mean is None else int(amount / mean))


def max_messages_per_partition(
    current_offsets: Offsets,
    latest_offsets: Offsets,
    rate: float | None,
    batch_interval_ms: int,
    max_rate_per_partition: PerPartitionLimit = 0,
    min_rate_per_partition: PerPartitionLimit = 1,
    topic_weights: Mapping[str, float] | None = None,
) -> dict[TopicPartition, int] | None:
    """How many messages each partition may contribute to one batch, or None for no limit.

    ``rate`` is the estimator's latest rate in records/s for the whole stream (None, NaN or
    <= 0 when there is none).  With a positive rate, each partition gets ``rate * lag / total
    lag``, capped at its ``max_rate_per_partition`` (0: no cap).  With ``topic_weights`` the
    rate is first shared among topics (:func:`topic_shares`), then within each topic by lag.
    Without a rate, each capped partition gets its cap and the others are unlimited.  The
    per-second limit times the batch's seconds is truncated and floored at
    ``ceil(min_rate_per_partition * seconds)``, so a slow partition still advances in long
    batches.  No lag at all, or nothing to limit, gives None.
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
        topic_lag: dict[str, Fraction] = {}
        for (topic, _), partition_lag in lags.items():
            topic_lag[topic] = topic_lag.get(topic, Fraction(0)) + partition_lag
        if topic_weights is None:  # Spark's: by lag alone
            topic_rate = {t: exact_rate * n / total_lag for t, n in topic_lag.items()}
        else:
            seconds = Fraction(batch_interval_ms, 1000)
            shares = topic_shares(topic_lag, exact_rate * seconds, topic_weights)
            topic_rate = {t: r / seconds for t, r in shares.items()}
        for tp, partition_lag in lags.items():
            lagging = topic_lag[tp[0]]
            share = partition_lag / lagging * topic_rate[tp[0]] if lagging else Fraction(0)
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


def by_timestamp(
    found: Mapping[TopicPartition, int | None], latest: Offsets, strategy: str, what: str
) -> dict[TopicPartition, int]:
    """Spark's start/end by timestamp: each partition's first offset whose timestamp is at or after
    the one asked (``found``, the brokers' ListOffsets answer; None when no record is that late).

    ``strategy`` is Spark's ``startingOffsetsByTimestampStrategy``: ``error`` refuses a partition
    without such a record, ``latest`` takes its latest offset.  ``what`` names the option.
    """
    none = sorted(tp for tp, offset in found.items() if offset is None)
    if none and strategy == "error":
        raise InvalidArgument(
            f"{what}: no record at or after the timestamp in {', '.join(f'{t}/{p}' for t, p in none)}; "
            "set startingOffsetsByTimestampStrategy=latest to start those at their latest offset"
        )
    return {tp: latest[tp] if offset is None else offset for tp, offset in found.items()}


def split_ranges(
    ranges: Iterable[OffsetRange], min_partitions: int | None, max_records: int | None
) -> list[OffsetRange]:
    """Spark's ``KafkaOffsetRangeCalculator`` (3.2 and later): ranges over ``max_records`` cut into
    equal parts; then, with fewer than ``min_partitions``, the ranges whose share of the total
    rounds to two parts or more share the partitions the small ones leave, by size (a hot
    partition becomes several tasks).  The parts cover each range exactly once."""
    parts = [p for r in ranges if r.count > 0 for p in _cut(r, -(-r.count // max_records) if max_records else 1)]
    if not min_partitions or len(parts) >= min_partitions:
        return parts

    def part_count(size: int, total: int, wanted: int) -> int:
        return max(math.floor(Fraction(size * wanted, total) + Fraction(1, 2)), 1)  # Scala's round: half up

    total = sum(r.count for r in parts)
    whole = [r for r in parts if part_count(r.count, total, min_partitions) == 1]
    split_total = total - sum(r.count for r in whole)
    split_wanted = max(min_partitions - len(whole), 1)
    return [p for r in parts for p in _cut(r, 1 if r in whole else part_count(r.count, split_total, split_wanted))]


def _cut(r: OffsetRange, n: int) -> list[OffsetRange]:
    """``r`` in ``n`` consecutive parts whose sizes differ by at most one."""
    bounds = [r.from_offset + r.count * i // n for i in range(n + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def offsets_behind(end: Offsets, latest: Offsets) -> dict[str, float]:
    """Spark's Kafka source metrics: how far each partition's batch end is behind its latest offset
    (``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest``, ``avgOffsetsBehindLatest``); empty
    when no partition is known on both sides."""
    behind = [max(latest[tp] - offset, 0) for tp, offset in end.items() if tp in latest]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": float(min(behind)),
        "maxOffsetsBehindLatest": float(max(behind)),
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
    }


def batch_due(available: int, min_records: int | None, waited_ms: float, max_delay_ms: int) -> bool:
    """Spark's ``minOffsetsPerTrigger`` with ``maxTriggerDelay``: a batch runs once ``min_records``
    are available, or anything at all is and the last batch ran ``max_delay_ms`` ago."""
    if available <= 0:
        return False
    return min_records is None or available >= min_records or waited_ms >= max_delay_ms


class DataLossError(SluiceError, RuntimeError):
    """Offsets a reader was to read are gone from the log (Spark's ``failOnDataLoss=true``)."""


def data_loss(current: Offsets, earliest: Offsets, latest: Offsets) -> tuple[dict[TopicPartition, int], list[str]]:
    """Where each partition can go on from, and what was lost (empty: nothing): offsets before the
    log start (retention), a log that ends before them (a recreated topic), a partition no longer
    in ``latest`` (a deleted topic; left out of the answer)."""
    moved: dict[TopicPartition, int] = {}
    lost: list[str] = []
    for (topic, partition), offset in sorted(current.items()):
        tp = (topic, partition)
        if tp not in latest:
            lost.append(f"{topic}/{partition}: the partition is gone (topic deleted?)")
        elif tp in earliest and offset < earliest[tp]:
            lost.append(f"{topic}/{partition}: offsets {offset} to {earliest[tp] - 1} are no longer in the log")
            moved[tp] = earliest[tp]
        elif latest[tp] < offset:
            lost.append(f"{topic}/{partition}: the log ends at {latest[tp]}, before offset {offset} (topic recreated?)")
            moved[tp] = latest[tp]
        else:
            moved[tp] = offset
    return moved, lost
