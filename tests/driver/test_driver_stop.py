"""Stopping a ``StreamingDriver`` from a script, as docs/guide/driver-api.md shows: ``stop()`` from
another thread, and the guide's own SIGTERM snippet, run as written."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.spark_driver import StreamingDriver
from tests.driver.fakes import MemorySource

pytestmark = pytest.mark.spark

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "driver-api.md"


class Seen:
    """The batch function: records the values, and says when a batch with records has run.

    An empty batch runs no Spark job: the driver makes one every 100 ms while the first job (a
    Python worker starting) takes seconds, and a graceful stop runs every batch queued by then, so
    a job per empty batch made the stop wait out a backlog of hundreds of them on a loaded machine.
    """

    def __init__(self) -> None:
        self.values: list[int] = []
        self.ran = threading.Event()

    def __call__(self, batch) -> None:
        if batch.num_records:
            self.values.extend(batch.rdd.collect())
        if self.values:
            self.ran.set()


@pytest.fixture
def restore_signals() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.timing("tolerates 120 s for a stop within a batch: any load that lets Spark run")
def test_stop_from_another_thread_ends_the_await_loop(spark) -> None:
    source, fn = MemorySource(), Seen()
    driver = StreamingDriver(spark, source=source, batch_interval_ms=100, backpressure=False)
    driver.foreach_batch(fn).start()
    source.offer([1, 2, 3])

    requested: list[float] = []

    def stopper() -> None:
        fn.ran.wait(120)
        source.offer([4, 5])  # received before the stop: the last batch takes it
        requested.append(time.monotonic())
        driver.stop()

    threading.Thread(target=stopper).start()
    deadline = time.monotonic() + 300
    while not driver.await_termination(timeout=0.2):
        assert time.monotonic() < deadline, "the driver did not stop"
    assert requested and time.monotonic() - requested[0] < 120, "await_termination did not see the stop"
    assert sorted(fn.values) == [1, 2, 3, 4, 5] and driver.state == "stopped" and source.stopped


@pytest.mark.timing("tolerates 300 s for a graceful stop: any load that lets Spark run")
def test_the_guides_sigterm_snippet_stops_the_driver_gracefully(spark, restore_signals) -> None:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    snippet = next(b for b in blocks if "signal.signal" in b)
    source, fn = MemorySource(), Seen()
    driver = StreamingDriver(spark, source=source, batch_interval_ms=100, backpressure=False)
    driver.foreach_batch(fn)
    source.offer([1, 2, 3])

    def terminate() -> None:
        fn.ran.wait(120)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs on the main thread, in the snippet's loop

    threading.Thread(target=terminate).start()
    started = time.monotonic()
    exec(snippet, {"driver": driver})  # the guide's code, run as written
    assert driver.state == "stopped" and source.stopped and sorted(fn.values) == [1, 2, 3]
    assert time.monotonic() - started < 300
