"""The pure maths of direct mode: worked examples from the issue and properties (hypothesis)."""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice import block_info
from sluice.kafka.offsets import topic_shares
from sluice.spark_driver.direct import OffsetRange, clamp, lag, max_messages_per_partition, offset_ranges

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def test_importable_without_spark_or_kafka() -> None:
    import subprocess

    code = (
        "import sys, sluice.spark_driver.direct as d; "
        "assert 'pyspark' not in sys.modules and 'aiokafka' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_offset_range_is_the_tracker_one() -> None:
    assert OffsetRange is block_info.OffsetRange


# --- worked examples of the issue -------------------------------------------------------------


def test_caps_alone_without_rate() -> None:
    # batch 100 ms, cap 100/s, no rate, lags 50 and 50 -> 10 each
    assert max_messages_per_partition({A: 0, B: 0}, {A: 50, B: 50}, None, 100, 100) == {A: 10, B: 10}


def test_rate_without_lag_is_none() -> None:
    assert max_messages_per_partition({A: 7, B: 3}, {A: 7, B: 3}, 100, 100) is None


def test_rate_split_then_capped() -> None:
    # rate 1000, caps 50 and 100, lags 1000 and 1000 -> 5 and 10
    got = max_messages_per_partition({A: 0, B: 0}, {A: 1000, B: 1000}, 1000, 100, {A: 50, B: 100})
    assert got == {A: 5, B: 10}


# --- more cases ---------------------------------------------------------------------------------


def test_skewed_lag_shares_in_proportion() -> None:
    got = max_messages_per_partition({A: 0, B: 0, C: 0}, {A: 6000, B: 3000, C: 1000}, 1000, 1000, 0, 0)
    assert got == {A: 600, B: 300, C: 100}


def test_min_floor_counts_the_batch_seconds() -> None:
    # a 60 s batch with min 5/s gives at least 300 (Spark would floor at 5)
    got = max_messages_per_partition({A: 0, B: 0}, {A: 1_000_000, B: 1}, 10, 60_000, 0, 5)
    assert got[B] == 300
    assert got[A] == 599  # 10 * 1e6/(1e6+1) * 60 = 599.9994 truncated


def test_min_floor_keeps_one_message_in_short_batches() -> None:
    # ceil(1/s * 0.1 s) = 1, as Spark's default of 1
    got = max_messages_per_partition({A: 0, B: 0}, {A: 10_000, B: 1}, 10, 100)
    assert got == {A: 1, B: 1}


def test_exact_decimal_arithmetic() -> None:
    # 0.1/s over 10 s is one message, not two; 0.3 s at 10/s is 3, not 2
    assert max_messages_per_partition({A: 0}, {A: 100}, None, 10_000, 0.1, 0.1) == {A: 1}
    assert max_messages_per_partition({A: 0}, {A: 100}, None, 300, 10, 0) == {A: 3}


@pytest.mark.parametrize("rate", [0, 0.0, -5, None, float("nan")])
def test_zero_negative_or_missing_rate_means_caps_alone(rate) -> None:
    assert max_messages_per_partition({A: 0, B: 0}, {A: 10, B: 10_000}, rate, 1000, 20) == {A: 20, B: 20}
    assert max_messages_per_partition({A: 0, B: 0}, {A: 10, B: 10_000}, rate, 1000, 0) is None


def test_caps_alone_leaves_uncapped_partitions_unlimited() -> None:
    got = max_messages_per_partition({A: 0, B: 0}, {A: 100, B: 100}, None, 1000, {A: 5})
    assert got == {A: 5}
    assert clamp({A: 0, B: 0}, {A: 100, B: 100}, got) == {A: 5, B: 100}


def test_callable_per_partition_config() -> None:
    got = max_messages_per_partition({A: 0, C: 0}, {A: 100, C: 100}, None, 1000, lambda tp: 7 if tp[0] == "u" else 3)
    assert got == {A: 3, C: 7}


def test_partition_behind_current_counts_lag_zero() -> None:
    assert lag({A: 100, B: 0}, {A: 40, B: 10}) == {A: 0, B: 10}
    got = max_messages_per_partition({A: 100, B: 0}, {A: 40, B: 10}, 100, 1000, 0, 0)
    assert got == {A: 0, B: 100}
    until = clamp({A: 100, B: 0}, {A: 40, B: 10}, got)
    assert until == {A: 100, B: 10}  # never backwards
    assert [r.count for r in offset_ranges({A: 100, B: 0}, until)] == [0, 10]


def test_clamp_without_limit_reads_to_latest() -> None:
    assert clamp({A: 3, B: 5}, {A: 10, B: 5}, None) == {A: 10, B: 5}


def test_bad_arguments_name_the_setting() -> None:
    with pytest.raises(ValueError, match="batch_interval_ms"):
        max_messages_per_partition({A: 0}, {A: 1}, 1, 0)
    with pytest.raises(ValueError, match="max_rate_per_partition of t/0"):
        max_messages_per_partition({A: 0}, {A: 1}, 1, 100, {A: -1})
    with pytest.raises(KeyError, match="t/1"):
        max_messages_per_partition({A: 0}, {A: 1, B: 1}, 1, 100)


# --- properties ---------------------------------------------------------------------------------

partitions = st.lists(st.tuples(st.integers(0, 10**9), st.integers(-1000, 10**7)), min_size=1, max_size=6)
limits = st.one_of(st.just(0), st.integers(0, 10**5), st.floats(0, 1e5, allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(
    parts=partitions,
    rate=st.one_of(st.none(), st.floats(-10, 1e7, allow_nan=False)),
    batch_ms=st.integers(1, 120_000),
    max_rate=limits,
    min_rate=limits,
)
@pytest.mark.slow
def test_clamped_ranges_stay_within_lag_and_forward(parts, rate, batch_ms, max_rate, min_rate) -> None:
    current = {("p", i): c for i, (c, _) in enumerate(parts)}
    latest = {("p", i): max(c + d, 0) for i, (c, d) in enumerate(parts)}
    limit = max_messages_per_partition(current, latest, rate, batch_ms, max_rate, min_rate)
    until = clamp(current, latest, limit)
    lags = lag(current, latest)
    for tp, end in until.items():
        assert 0 <= end - current[tp] <= lags[tp]
    if limit is not None:
        assert all(v >= 0 for v in limit.values())
        for tp, end in until.items():
            if tp in limit:
                assert end - current[tp] <= limit[tp]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(parts=partitions, rate=st.floats(0.001, 1e7, allow_nan=False), batch_ms=st.integers(1, 120_000), max_rate=limits)
def test_total_never_above_rate_times_seconds_without_floor(parts, rate, batch_ms, max_rate) -> None:
    current = {("p", i): c for i, (c, _) in enumerate(parts)}
    latest = {("p", i): max(c + d, 0) for i, (c, d) in enumerate(parts)}
    limit = max_messages_per_partition(current, latest, rate, batch_ms, max_rate, 0)
    if sum(lag(current, latest).values()) == 0:
        assert limit is None
        return
    assert limit is not None
    assert sum(limit.values()) <= math.floor(rate * batch_ms / 1000 + 1e-9)
    if max_rate:
        assert all(v <= math.floor(max_rate * batch_ms / 1000 + 1e-9) for v in limit.values())


@settings(max_examples=200, deadline=None)
@given(lags=st.lists(st.integers(0, 10**6), min_size=2, max_size=5), rate=st.integers(1, 10**6))
def test_shares_follow_lag(lags, rate) -> None:
    current = {("p", i): 0 for i in range(len(lags))}
    latest = {("p", i): n for i, n in enumerate(lags)}
    limit = max_messages_per_partition(current, latest, rate, 1000, 0, 0)
    if sum(lags) == 0:
        assert limit is None
        return
    for i, n in enumerate(lags):
        for j, m in enumerate(lags):
            if n >= m:
                assert limit[("p", i)] >= limit[("p", j)]


# --- topic weights ------------------------------------------------------------------------------


def test_a_quiet_topic_takes_its_whole_lag_where_spark_gives_it_a_sliver() -> None:
    current, latest = {A: 0, C: 0}, {A: 300, C: 20}
    assert max_messages_per_partition(current, latest, 100, 1000, 0, 0) == {A: 93, C: 6}  # by lag, as Spark
    assert max_messages_per_partition(current, latest, 100, 1000, 0, 0, {}) == {A: 80, C: 20}
    latest = {A: 300, C: 200}
    assert max_messages_per_partition(current, latest, 100, 1000, 0, 0, {"u": 3}) == {A: 25, C: 75}


def test_within_a_topic_the_share_follows_lag_and_caps_still_apply() -> None:
    current, latest = {A: 0, B: 0, C: 0}, {A: 90, B: 30, C: 500}
    assert max_messages_per_partition(current, latest, 100, 1000, 0, 0, {}) == {A: 37, B: 12, C: 50}
    assert max_messages_per_partition(current, latest, 100, 1000, 20, 0, {}) == {A: 20, B: 12, C: 20}


def test_bad_weights_name_the_topic() -> None:
    with pytest.raises(ValueError, match="topic weights must be above 0, got u=0"):
        max_messages_per_partition({A: 0, C: 0}, {A: 1, C: 1}, 10, 1000, 0, 0, {"u": 0})


@settings(max_examples=300, deadline=None)
@given(
    needs=st.dictionaries(st.sampled_from("abcde"), st.integers(0, 10**6), min_size=1),
    weights=st.dictionaries(st.sampled_from("abcde"), st.integers(1, 100)),
    budget=st.integers(0, 10**6),
)
@pytest.mark.slow
def test_water_filling_spends_the_budget_fairly(needs, weights, budget) -> None:
    need = {t: Fraction(n) for t, n in needs.items()}
    shares = topic_shares(need, Fraction(budget), weights)
    assert all(0 <= shares[t] <= need[t] for t in need)  # nobody takes more than it lags
    assert sum(shares.values()) == min(budget, sum(need.values()))  # the budget is spent or the lag is
    short = [t for t in need if shares[t] < need[t]]  # who is held back gets at least its weighted share
    for t in short:
        for u in need:
            if need[u] > 0:
                assert shares[t] / weights.get(t, 1) >= min(shares[u], need[u]) / weights.get(u, 1)
