"""RateLimiter accuracy on the real clock, acquired in batches of 100 as ``store_many`` does.

The achieved rate is measured between the first and the last grant: the first grant is free
(Guava), and every later one is paid for by the wait before it, so ``(grants - 1) * 100`` permits
were paid over that span.  Only the last grant's wake-up latency enters the figure, which keeps
the measure nearly independent of how busy the (shared) CPU is.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sluice.receiver.rate_limiter import RateLimiter

BATCH = 100


async def achieved_rate(limiter: RateLimiter, seconds: float) -> float:
    first = last = None
    grants = 0
    while True:
        await limiter.acquire(BATCH)
        last = time.monotonic()
        first = first if first is not None else last
        grants += 1
        if last - first >= seconds:
            return (grants - 1) * BATCH / (last - first)


@pytest.mark.slow
@pytest.mark.parametrize("rate", [1_000, 10_000, 100_000])
async def test_achieved_rate_within_two_percent_over_three_seconds(rate):
    limiter = RateLimiter(rate=rate)
    achieved = await achieved_rate(limiter, 3.0)
    assert achieved == pytest.approx(rate, rel=0.02), f"target {rate}/s, achieved {achieved:.0f}/s"


@pytest.mark.slow
async def test_rate_change_takes_effect_within_one_block_interval():
    interval = 0.2
    limiter = RateLimiter(rate=1_000)
    grants: list[float] = []
    stop = asyncio.Event()

    async def consume() -> None:
        while not stop.is_set():
            await limiter.acquire(BATCH)
            grants.append(time.monotonic())

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.6)  # the scenario: 0.6 s of grants at the old rate on the real clock
    changed = time.monotonic()
    limiter.set_rate(10_000)
    await asyncio.sleep(interval + 1.0)  # and a second beyond one interval at the new rate
    stop.set()
    await task
    # from one interval after the change on, the new rate holds
    window = [t for t in grants if changed + interval <= t <= changed + interval + 1.0]
    achieved = (len(window) - 1) * BATCH / (window[-1] - window[0])
    assert achieved == pytest.approx(10_000, rel=0.05)
    # and the first grant after the change came within one interval (no old debt paid at the old rate)
    first_after = min(t for t in grants if t > changed)
    assert first_after - changed < interval
