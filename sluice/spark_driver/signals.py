"""``InFlightSampler``: in-flight signals for the estimators that opt into them (``observe``).

Spark's estimator hears of a batch only when it completes.  An estimator with ``observe`` also
gets, every ``interval_ms``, what the driver sees meanwhile (:class:`sluice.estimators.base.InFlight`):
the running batch's elapsed time, the batches queued behind it, the records the tracker holds
unallocated and the receivers' lag.

Threads: one ("rate-signals") for the driver's lifetime, never one per batch.  Each sample copies
the scheduler's batches (in memory, under its lock) and makes one status call to the source on
this thread, so a slow tracker delays the next sample, never a batch; the estimator is called
under its controller's lock, as ``compute`` is, for microseconds.  Time is the driver's clock, so
a ``ManualClock`` drives the sampler in tests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from sluice.clock import Clock
from sluice.errors import InvalidArgument
from sluice.estimators.base import InFlight, QueuedBatch, RunningBatch
from sluice.spark_driver.batch import BatchInfo

log = logging.getLogger(__name__)

__all__ = ["InFlightSampler", "in_flight"]


def in_flight(
    now_ms: float,
    stream_id: int,
    batches: list[BatchInfo],
    backlog: tuple[int | None, int | None] | None,
    rate: float | None = None,
) -> InFlight:
    """One stream's signals from the scheduler's batches, the source's ``(backlog, lag)`` and the
    rate in force."""
    running: list[RunningBatch] = []
    queued: list[QueuedBatch] = []
    for info in batches:
        if info.processing_end_ms is not None:
            continue  # completed, being reported: compute has (or will have) it
        records = info.for_stream(stream_id).num_records
        if info.processing_start_ms is None:
            queued.append(QueuedBatch(info.batch_time_ms, records))
        else:
            running.append(RunningBatch(info.batch_time_ms, records, max(0.0, now_ms - info.processing_start_ms)))
    unallocated, lag = backlog if backlog is not None else (None, None)
    return InFlight(now_ms, tuple(running), tuple(queued), unallocated, lag, rate)


class InFlightSampler:
    """Samples in-flight signals every ``interval_ms`` and hands them to the controllers.

    :param controllers: each stream's ``RateController`` (only those whose estimator has
        ``observe`` are fed).
    :param batches: the scheduler's batches not yet completed (``JobScheduler.in_flight``).
    :param backlog: ``{stream: (unallocated records, receiver lag)}`` from the source, or ``None``
        when the source cannot tell (direct mode).
    :param clock: the driver's clock.
    :param interval_ms: time between samples.
    :param rate: a stream's rate in force (``RateLoop.current_rate``); ``None``: unbounded.
    """

    def __init__(
        self,
        controllers: Mapping[int, Any],
        batches: Callable[[], list[BatchInfo]],
        backlog: Callable[[], dict[int, tuple[int | None, int | None]]] | None,
        *,
        clock: Clock,
        interval_ms: float,
        rate: Callable[[int], float | None] = lambda stream_id: None,
    ) -> None:
        if not interval_ms > 0:
            raise InvalidArgument(f"the in-flight sampling interval must be above 0 ms, got {interval_ms!r}")
        self.controllers = {s: c for s, c in controllers.items() if c.wants_signals}
        self.batches = batches
        self.backlog = backlog
        self.rate = rate
        self.clock = clock
        self.interval_ms = float(interval_ms)
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backlog_failed = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="rate-signals", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def sample(self) -> None:
        """Take one sample now and feed it to every controller that opted in."""
        backlogs = self._read_backlog()
        now = self.clock.now_ms()
        batches = self.batches()
        for stream_id, controller in self.controllers.items():
            controller.on_in_flight(in_flight(now, stream_id, batches, backlogs.get(stream_id), self.rate(stream_id)))
        self.samples += 1

    def _read_backlog(self) -> dict[int, tuple[int | None, int | None]]:
        if self.backlog is None:
            return {}
        try:
            backlogs = self.backlog()
        except Exception as exc:  # noqa: BLE001 - the tracker may be away; the other signals still count
            if not self._backlog_failed:
                log.warning(
                    "in-flight signals: the source's backlog could not be read (%s); going on "
                    "without it until it can (logged once)",
                    exc,
                )
            self._backlog_failed = True
            return {}
        self._backlog_failed = False
        return backlogs

    def _main(self) -> None:
        next_ms = self.clock.now_ms() + self.interval_ms
        while True:
            self.clock.wait_till(next_ms, self._stop)
            if self._stop.is_set():
                return
            try:
                self.sample()
            except Exception:  # a sample is never worth the loop
                log.exception("in-flight signals: a sample failed")
            # a sample that overran (a slow tracker) skips the ticks it missed rather than bunching up
            next_ms = max(next_ms + self.interval_ms, self.clock.now_ms() + self.interval_ms / 2)
