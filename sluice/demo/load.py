"""The demo's load generator: an aiokafka producer that follows a :mod:`profile`.

Each record's value is ``"<seq> <words...>"``: the sequence number lets the demo prove that every
record offered was processed exactly once, the words give the word count something to count (a
skewed vocabulary, so the top words are stable). It paces itself against the profile's integral,
not by sleeping a fixed time per record, so a slow tick is caught up and the offered total is exact.

Run alone (the compose file's ``load`` service does): ``python -m sluice.demo.load
--bootstrap-servers HOST:PORT --topic sluice --profile step --seconds 60``. It prints one JSON line
per report interval (``t``, ``rate``, ``sent``, ``acked``) and a last line with ``done: true``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import time
from collections.abc import Callable
from typing import TextIO

from sluice.demo.profile import Profile, ProfileError, parse

# A small vocabulary with Zipf-like weights: a handful of words dominate, as in real text.
WORDS = (
    "spark",
    "stream",
    "block",
    "batch",
    "rate",
    "kafka",
    "receiver",
    "tracker",
    "driver",
    "sluice",
    "offset",
    "partition",
    "delay",
    "backpressure",
    "estimator",
    "interval",
    "record",
    "window",
    "checkpoint",
    "executor",
)
WEIGHTS = tuple(1.0 / (rank + 1) for rank in range(len(WORDS)))
WORDS_PER_RECORD = 5


def make_values(first_seq: int, count: int, rng: random.Random) -> list[bytes]:
    """``count`` record values numbered from ``first_seq``."""
    words = rng.choices(WORDS, WEIGHTS, k=count * WORDS_PER_RECORD)
    return [
        (f"{first_seq + i} " + " ".join(words[i * WORDS_PER_RECORD : (i + 1) * WORDS_PER_RECORD])).encode()
        for i in range(count)
    ]


async def produce(
    bootstrap: str,
    topic: str,
    profile: Profile,
    *,
    tick_s: float = 0.05,
    report_s: float = 0.5,
    out: TextIO = sys.stdout,
    stop: asyncio.Event | None = None,
    seed: int = 7,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Offer the profile's records to ``topic``; return how many the broker acknowledged."""
    # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
    from aiokafka import AIOKafkaProducer

    stop = stop or asyncio.Event()
    rng = random.Random(seed)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=5, acks=1, max_batch_size=256 * 1024, enable_idempotence=False
    )
    await producer.start()
    sent = acked = failed = 0
    pending: set[asyncio.Future] = set()

    def on_done(fut: asyncio.Future) -> None:
        nonlocal acked, failed
        pending.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            failed += 1
        else:
            acked += 1

    def report(t: float, done: bool = False) -> None:
        line = {"t": round(t, 3), "rate": profile.rate_at(t), "sent": sent, "acked": acked, "failed": failed}
        if done:
            line["done"] = True
        out.write(json.dumps(line) + "\n")
        out.flush()

    start = clock()
    next_report = 0.0
    try:
        while not stop.is_set():
            t = clock() - start
            due = profile.records_until(min(t, profile.seconds)) - sent
            for value in make_values(sent, max(due, 0), rng):
                fut = await producer.send(topic, value)
                pending.add(fut)
                fut.add_done_callback(on_done)
                sent += 1
            if t >= next_report:
                report(t)
                next_report += report_s
            if t >= profile.seconds:
                break
            try:
                await asyncio.wait_for(stop.wait(), tick_s)
            except TimeoutError:
                pass
        await producer.flush()
        if pending:
            await asyncio.wait(list(pending), timeout=30)
    finally:
        await producer.stop()
    report(clock() - start, done=True)
    return acked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sluice-demo-load", description="Offer records to Kafka following a load profile"
    )
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", default="sluice")
    parser.add_argument("--profile", default="step", help="step, constant, spike, ramp or RATE@SECONDS,...")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--base-rate", type=float, default=1000.0, help="records/s the named profiles scale")
    args = parser.parse_args(argv)
    try:
        profile = parse(args.profile, args.seconds, args.base_rate)
    except ProfileError as exc:
        parser.exit(2, f"sluice-demo-load: {exc}\n")

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await produce(args.bootstrap_servers, args.topic, profile, stop=stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
