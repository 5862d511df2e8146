"""Turns trigger times into batches (Spark's ``JobGenerator`` with its ``RecurringTimer``).

One thread ("JobGenerator") owns time.  On start it first re-runs, in order, the batches the
source reports as created but not completed (a driver killed mid-batch), then waits for each
trigger time of the :mod:`~sluice.spark_driver.triggers` policy, asks the source for the batch and submits
it to the :class:`~sluice.spark_driver.job_scheduler.JobScheduler`.  Batch times are the trigger times, so
under ``fixed`` they are exact multiples of the interval, as in Spark.

Stopping follows Spark: a graceful stop lets the timer fire once more, then the scheduler drains its
queue; a hard stop returns at once and leaves queued batches pending at the source for the next
start.  That last batch is bounded like any other (Spark's takes every block received, its receivers
being stopped first; Sluice's receivers are services of their own that keep running): blocks past the
bound stay queued at the tracker, durably, for the next start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sluice.clock import Clock
from sluice.config import Trigger
from sluice.spark_driver import metrics
from sluice.spark_driver.batch import Batch
from sluice.spark_driver.job_scheduler import JobHandle, JobScheduler
from sluice.spark_driver.source import BatchSource
from sluice.spark_driver.triggers import TriggerPolicy, next_batch_time
from sluice.stages import now_ms

log = logging.getLogger(__name__)


class JobGenerator:
    """The timer loop; ``on_finished`` runs when a finite trigger (once, available-now) is done.

    :param source: makes each batch (``create_batch``) and rebuilds recovered ones.
    :param scheduler: runs the batches.
    :param trigger: decides when batches start.
    :param clock: the timer's clock (a ``ManualClock`` in tests).
    :param rate: the current rate, handed to the source with each batch (direct mode sizes ranges by it).
    :param on_finished: see above.
    :param on_fatal: called with an error that stops the stream (the source failed for good).
    """

    def __init__(
        self,
        source: BatchSource,
        scheduler: JobScheduler,
        trigger: TriggerPolicy,
        *,
        clock: Clock,
        rate: Callable[[], float | None] = lambda: None,
        on_finished: Callable[[], None] = lambda: None,
        on_fatal: Callable[[BaseException], None] = lambda exc: None,
    ) -> None:
        self.source = source
        self.scheduler = scheduler
        self.trigger = trigger
        self.clock = clock
        self.rate = rate
        self.on_finished = on_finished
        self.on_fatal = on_fatal
        self.last_batch_time_ms: int | None = None
        self.batches_generated = 0
        self._stop_now = threading.Event()
        self._stop_after_next = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_run_batch_ms: int | None = None

    def start(self, recovered: list[int] | None = None, last_batch_ms: int | None = None) -> None:
        """Re-run ``recovered``, then tick; ``last_batch_ms``: the latest batch time of the stream's
        earlier runs, from which the trigger knows a restart (see ``first_trigger``)."""
        self._last_run_batch_ms = last_batch_ms
        self._thread = threading.Thread(
            target=self._main, args=(list(recovered or []),), name="JobGenerator", daemon=True
        )
        self._thread.start()

    def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Graceful: one more trigger (a batch bounded as usual), then end the loop."""
        if graceful:
            self._stop_after_next.set()
        else:
            self._stop_now.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                self._stop_now.set()
                thread.join(1)  # a thread still in a source call is woken when the driver stops the source

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the loop ------------------------------------------------------------------------------

    def _main(self, recovered: list[int]) -> None:
        try:
            self._recover(recovered)
            self._loop()
        except Exception as exc:  # reported to the driver, which stops with it
            log.exception("job generator failed")
            self.on_fatal(exc)

    def _recover(self, recovered: list[int]) -> None:
        """Re-run batches created before a restart, in order, with the input they had."""
        for batch_time in sorted(recovered):
            if self._stop_now.is_set():
                return
            log.info("re-running batch %d created before the restart", batch_time)
            batch = self.source.rebuild_batch(batch_time)
            handle = self._submit(batch)
            if self.trigger.waits_for_batch:
                self._wait(handle)

    def _loop(self) -> None:
        interval = self.trigger.interval_ms
        now = int(self.clock.now_ms())
        known = [t for t in (self._last_run_batch_ms, self.last_batch_time_ms) if t is not None]
        first = self.trigger.first_trigger(now, max(known, default=None))
        if first != self.trigger.first_trigger(now):
            log.info("batch %d: created at once, its boundary passed while no driver ran", first)
        if self.last_batch_time_ms is not None and first <= self.last_batch_time_ms:
            first = next_batch_time(self.last_batch_time_ms, interval or 1)
        trigger_ms: int | None = first
        while trigger_ms is not None:
            self.clock.wait_till(trigger_ms, self._stop_now)
            if self._stop_now.is_set():
                return
            last = self._stop_after_next.is_set()
            handle = self._generate(trigger_ms)
            if last:
                return
            if self.trigger.waits_for_batch:
                if handle is not None:
                    self._wait(handle)
                    if self._stop_now.is_set():
                        return
                end = int(self.clock.now_ms())
                if handle is not None:
                    elapsed = self.trigger.falling_behind(trigger_ms, end)
                    if elapsed is not None:
                        metrics.FALLING_BEHIND.inc()
                        log.warning(
                            "current batch is falling behind: the trigger interval is %d ms, but the batch took %d ms",
                            interval,
                            elapsed,
                        )
                more = self.source.has_more_available() if self.trigger.name == Trigger.AVAILABLE_NOW else True
                trigger_ms = self.trigger.next_trigger(trigger_ms, end, more)
            else:
                trigger_ms = self.trigger.next_trigger(trigger_ms, trigger_ms)
        log.info("trigger %s is done after %d batch(es)", self.trigger.name, self.batches_generated)
        self.on_finished()

    def _generate(self, batch_time_ms: int) -> JobHandle | None:
        """One tick: ask the source for the batch and queue it (Spark's ``generateJobs``)."""
        tick = now_ms()  # the wall clock, as every stamp of sluice.stages (self.clock may be a test's)
        try:
            batch = self.source.create_batch(batch_time_ms, self.rate())
        except ConnectionError as exc:  # the tracker is away: an outage is one line per tick, not a traceback
            metrics.BATCH_CREATE_FAILURES.inc()
            log.warning("batch %d could not be created: %s; the next tick tries again", batch_time_ms, exc)
            return None
        except Exception:  # not an outage: the traceback says where
            metrics.BATCH_CREATE_FAILURES.inc()
            log.exception("batch %d could not be created; the next tick tries again", batch_time_ms)
            return None
        if batch is None:
            log.debug("batch %d: nothing allocated", batch_time_ms)
            return None
        batch.stamps.tick = tick
        return self._submit(batch)

    def _submit(self, batch: Batch) -> JobHandle:
        self.last_batch_time_ms = batch.time_ms
        self.batches_generated += 1
        return self.scheduler.submit(batch)

    def _wait(self, handle: JobHandle) -> None:
        while not handle.done.wait(0.05):
            if self._stop_now.is_set():
                return
