"""RateLimiter: Spark's updateRate rule and Guava SmoothBursty behaviour, on a manual clock."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.clock import ManualClock
from sluice.receiver.rate_limiter import RateLimiter, SmoothBursty


@pytest.mark.parametrize(
    "max_rate, new_rate, expected",
    [
        (None, 105, 105),
        (110, 105, 105),
        (100, 105, 100),
        (100, 0, 100),
        (100, -5, 100),
        (100, math.nan, 100),
    ],
)
async def test_set_rate_follows_sparks_rule(max_rate, new_rate, expected):
    limiter = RateLimiter(max_rate=max_rate, clock=ManualClock())
    limiter.set_rate(new_rate)
    assert limiter.rate == expected


def test_initial_rate_is_min_of_rate_and_max():
    clock = ManualClock()
    assert RateLimiter(clock=clock).rate == math.inf
    assert RateLimiter(max_rate=0, clock=clock).rate == math.inf
    assert RateLimiter(rate=50, clock=clock).rate == 50
    assert RateLimiter(rate=500, max_rate=100, clock=clock).rate == 100
    assert RateLimiter(max_rate=100, clock=clock).rate == 100


async def test_first_acquire_is_immediate_and_the_next_pays():
    clock = ManualClock(1_000)
    limiter = RateLimiter(rate=10, clock=clock)
    assert await limiter.acquire() == 0.0
    assert not limiter.try_acquire()
    waiter = asyncio.create_task(limiter.acquire())
    await clock.wait_for_sleepers()
    clock.advance(99)
    await asyncio.sleep(0)
    assert not waiter.done()
    clock.advance(1)
    assert await waiter == pytest.approx(0.1)
    assert limiter.wait_seconds_total == pytest.approx(0.1)


async def test_large_acquire_is_not_refused_but_paid_by_the_following_wait():
    clock = ManualClock()
    limiter = RateLimiter(rate=100, clock=clock)
    assert await limiter.acquire(1000) == 0.0  # granted at once
    waiter = asyncio.create_task(limiter.acquire(1))
    await clock.wait_for_sleepers()
    clock.advance(9_999)
    await asyncio.sleep(0)
    assert not waiter.done()
    clock.advance(1)
    assert await waiter == pytest.approx(10.0)


async def test_at_most_one_second_of_permits_is_stored():
    clock = ManualClock()
    limiter = RateLimiter(rate=10, clock=clock)
    await limiter.acquire()
    clock.advance(60_000)  # idle for a minute: only 10 permits (one second) are saved
    assert all(limiter.try_acquire() for _ in range(10))
    assert limiter.try_acquire()  # the 11th is granted (nothing owed yet) ...
    assert not limiter.try_acquire()  # ... and makes the next one wait


async def test_rate_change_reaches_a_caller_already_waiting():
    clock = ManualClock()
    limiter = RateLimiter(rate=1, clock=clock)
    await limiter.acquire(10)  # 10 s owed at 1/s
    waiter = asyncio.create_task(limiter.acquire(1))
    await clock.wait_for_sleepers()
    clock.advance(1_000)  # 9 permits still owed
    limiter.set_rate(100)  # owed permits now cost 90 ms
    await asyncio.sleep(0)
    await clock.wait_for_sleepers()
    clock.advance(89)
    await asyncio.sleep(0)
    assert not waiter.done()
    clock.advance(1)
    await asyncio.wait_for(waiter, 1)
    # the waiter's own permit was priced at the new rate: the next one waits 10 ms, not 1 s
    assert clock.next_due() is None
    assert not limiter.try_acquire()
    clock.advance(10)
    assert limiter.try_acquire()


async def test_lowering_the_rate_prices_the_next_permit_not_the_ones_already_granted():
    clock = ManualClock()
    limiter = RateLimiter(rate=1000, clock=clock, min_wait_ms=0)
    await limiter.acquire(100)  # 100 permits granted at 1 ms each: the next caller waits 100 ms
    limiter.set_rate(10)  # the 100 already granted keep their price (Guava), not 10 s
    waiter = asyncio.create_task(limiter.acquire(1))
    await clock.wait_for_sleepers()
    clock.advance(99)
    await asyncio.sleep(0)
    assert not waiter.done()
    clock.advance(1)
    await asyncio.wait_for(waiter, 1)
    # the waiter's permit is the first at the new rate: the one after it waits 100 ms
    assert not limiter.try_acquire()
    clock.advance(99)
    assert not limiter.try_acquire()
    clock.advance(1)
    assert limiter.try_acquire()


async def test_unlimited_never_waits():
    limiter = RateLimiter(clock=ManualClock())
    for _ in range(100):
        assert await limiter.acquire(1_000_000) == 0.0
    assert limiter.try_acquire(10**9)


async def test_unlimited_to_limited_keeps_one_burst_like_guava():
    clock = ManualClock()
    limiter = RateLimiter(clock=clock)
    limiter.set_rate(5)
    assert all(limiter.try_acquire() for _ in range(6))
    assert not limiter.try_acquire()


async def test_negative_permits_are_refused_by_name():
    limiter = RateLimiter(rate=5, clock=ManualClock())
    with pytest.raises(ValueError, match="permits"):
        await limiter.acquire(-1)


async def test_two_waiters_share_the_rate():
    clock = ManualClock()
    limiter = RateLimiter(rate=10, clock=clock)
    await limiter.acquire(1)
    a = asyncio.create_task(limiter.acquire(1))
    b = asyncio.create_task(limiter.acquire(1))
    await clock.wait_for_sleepers(2)
    for _ in range(3):
        clock.advance(100)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(a, b), 1)
    assert clock.now_ms() == 300


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(rate=st.floats(0.5, 1e6), steps=st.lists(st.tuples(st.floats(0, 5_000), st.integers(0, 5_000)), max_size=60))
def test_grants_never_exceed_rate_times_time_plus_one_burst(rate, steps):
    """Whatever the pattern, permits handed out by the time each is *due* stay within the bucket."""
    bucket = SmoothBursty(rate, 0.0)
    now = 0.0
    granted_before_last = 0.0
    for gap, permits in steps:
        now += gap
        ready = bucket.reserve(permits, max(now, 0.0))
        now = max(now, ready)  # the caller proceeds at `ready`
        # everything granted before this reservation had to be paid by `now` (one burst of credit)
        assert granted_before_last <= rate * now / 1000.0 + rate * 1.0 + 1 + 1e-6 * granted_before_last
        granted_before_last += permits
