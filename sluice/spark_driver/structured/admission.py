"""Feedback admission control for Structured Streaming: the query's progress in, a rate out.

Structured Streaming bounds a micro-batch only statically (``maxOffsetsPerTrigger``).  Here each
finished batch's progress (start, duration, input rows) becomes a ``BatchInfo`` for the very
estimators and ``RateController`` the DStream driver uses (``pid``, ``adaptive``, plugins, all
through ``estimators.create``), and the rate they answer is published where both sides of the
query read it:

* ``sluice`` source: to the tracker (``publish_rate``), shared equally among the query's streams;
  the tracker passes it on to the receivers, as in receiver mode, and the source's ``latestOffset``
  bounds each stream's next batch by its share for one trigger interval;
* ``sluice-kafka`` source: to the ``rateFile`` (written atomically), which ``latestOffset`` reads.

The source's reader runs in a Python worker of Spark's driver, not in the session's process where
listeners run, so the rate travels through the tracker or the file, never through memory.

:class:`AdmissionControl` is the pure core (tested with plain progress maps); the
``StreamingQueryListener`` built by :func:`start_admission` is the thin shell around it.  The
scheduling delay follows Spark's ``ProcessingTimeExecutor``: a batch is due at the trigger
boundary after the previous batch's start, and a batch that starts later waited that long.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sluice.durable import atomic_write
from sluice.settings import DriverSettings
from sluice.spark_driver.batch import BatchInfo

log = logging.getLogger(__name__)

_ESTIMATOR = DriverSettings().estimator  # the schema's default (estimator.name)


@dataclass(frozen=True)
class Progress:
    """What admission needs of one ``StreamingQueryProgress``."""

    batch_id: int
    start_ms: int
    duration_ms: int
    input_rows: int


def _ms(timestamp: str) -> int:
    """Spark's progress timestamp (``2026-11-23T19:50:00.123Z``) in epoch milliseconds."""
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


def progress_of(data: Mapping[str, Any]) -> Progress | None:
    """The fields admission needs from a progress map (``json.loads(progress.json)``); None when one
    is missing or mistyped (such a progress is skipped, never fatal)."""
    try:
        return Progress(
            int(data["batchId"]), _ms(str(data["timestamp"])), int(data["batchDuration"]), int(data["numInputRows"])
        )
    except (KeyError, TypeError, ValueError):
        return None


class AdmissionControl:
    """Progress in, rates out through one ``RateController``.

    :param publish: where a new rate goes (tracker or rate file).
    :param trigger_interval_ms: the query's processing-time trigger (the estimators' batch interval).
    :param estimator: a registered estimator name (``adaptive`` by default, ``pid``, a plugin's).
    :param estimator_options: its options.
    :param stream: the ``stream`` label of the estimator metrics.
    """

    def __init__(
        self,
        publish: Callable[[float], Any],
        *,
        trigger_interval_ms: int,
        estimator: str = _ESTIMATOR,
        estimator_options: Mapping[str, Any] | None = None,
        stream: str = "structured",
    ) -> None:
        # the estimators load with the first admission, not on the workers that import the sources
        from sluice import estimators

        self.trigger_interval_ms = trigger_interval_ms
        self.controller = estimators.RateController(
            estimators.create(estimator, trigger_interval_ms, dict(estimator_options or {})), publish, stream=stream
        )
        self._last: Progress | None = None

    def due_ms(self, previous_start_ms: int) -> int:
        """When the batch after one that started at ``previous_start_ms`` was due (the next boundary)."""
        interval = self.trigger_interval_ms
        return previous_start_ms - previous_start_ms % interval + interval

    def batch_info(self, progress: Progress) -> BatchInfo:
        """The progress as the ``BatchInfo`` a DStream batch would have had."""
        due = progress.start_ms if self._last is None else min(self.due_ms(self._last.start_ms), progress.start_ms)
        return BatchInfo(
            batch_time_ms=due,
            num_records=progress.input_rows,
            submission_time_ms=due,
            processing_start_ms=progress.start_ms,
            processing_end_ms=progress.start_ms + progress.duration_ms,
            status="succeeded",
        )

    def on_progress(self, progress: Progress) -> float | None:
        """Feed one finished batch (each batch id once); the rate published, or None."""
        if self._last is not None and progress.batch_id <= self._last.batch_id:
            return None
        info = self.batch_info(progress)
        self._last = progress
        return self.controller.on_batch_completed(info)

    def latest_rate(self) -> float | None:
        return self.controller.latest_rate()


# --- where rates go ------------------------------------------------------------------------------


def read_rate(path: str) -> float | None:
    """The rate in a rate file; None when there is none yet or it cannot be read (logged)."""
    try:
        rate = json.loads(Path(path).read_text())["rate"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("rate file %s cannot be read (%s); batches go unbounded by admission until it can", path, exc)
        return None
    return float(rate) if isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0 else None


class RateFile:
    """Rates for ``sluice-kafka``: one JSON file, replaced atomically."""

    def __init__(self, path: str) -> None:
        self.path = path

    def publish(self, rate: float) -> None:

        atomic_write(self.path, json.dumps({"rate": rate}).encode())

    def latest(self) -> float | None:
        return read_rate(self.path)

    def close(self) -> None:
        """Nothing to release."""


class TrackerRates:
    """Rates for ``sluice``: published to the tracker, an equal share per stream of the query."""

    def __init__(self, client: Any, streams: tuple[int, ...]) -> None:
        self.client = client
        self.streams = streams

    def publish(self, rate: float) -> None:
        for s in self.streams:
            self.client.publish_rate(s, rate / len(self.streams))

    def latest(self) -> float | None:
        # the leader's: a standby's copy of the log may lag, or be empty, and the query would start
        # again from its initial rate instead of the one it last published
        rates = self.client.status(leader=True).get("rates") or {}
        found = [r for s in self.streams if (r := rates.get(s)) is not None and r > 0]
        return sum(found) if len(found) == len(self.streams) else None

    def close(self) -> None:
        self.client.close()


def publisher(options: Mapping[str, Any]) -> RateFile | TrackerRates:
    """Where the rate goes for a source with these options: the tracker (``sluice``), else ``rateFile``."""
    # the tracker's client loads only for a query that reads the tracker (a rateFile needs none of it)
    from sluice.spark_driver.structured.options import OptionError, sluice_options

    lowered = {str(k).lower(): v for k, v in options.items()}
    if "tracker" in lowered:
        # the tracker's client loads only for a query that reads the tracker (a rateFile needs none of it)
        from sluice.spark_driver.structured.source import connect

        parsed = sluice_options(options)
        return TrackerRates(connect(parsed), parsed.streams)
    if lowered.get("ratefile"):
        return RateFile(str(lowered["ratefile"]))
    raise OptionError("admission needs the source's tracker option (sluice) or a rateFile option (sluice-kafka)")


# --- the listener shell --------------------------------------------------------------------------


def start_admission(
    spark: Any,
    *,
    query_name: str,
    options: Mapping[str, Any],
    estimator: str = _ESTIMATOR,
    estimator_options: Mapping[str, Any] | None = None,
    initial_rate: float = 0.0,
) -> Any:
    """Admission control for the query named ``query_name``, reading the source's own ``options``.

    ``initial_rate`` bounds the first batches until the first estimate (nothing published when a
    rate is in force already, as after a restart).  Returns the listener, already added to
    ``spark.streams``; ``listener.stop()`` removes it.
    """
    # the listener and the tracker's options load on the driver only: the sources import this module on the workers
    from pyspark.sql.streaming.listener import StreamingQueryListener

    from sluice.spark_driver.structured.options import admission_settings

    interval = admission_settings(options).trigger_interval_ms
    sink = publisher(options)
    control = AdmissionControl(
        sink.publish,
        trigger_interval_ms=interval,
        estimator=estimator,
        estimator_options=estimator_options,
        stream=query_name,
    )
    if initial_rate > 0 and sink.latest() is None:
        sink.publish(float(initial_rate))

    stopped = False
    lock = threading.Lock()  # a progress event queued before stop() must not publish through a closed sink

    class AdmissionListener(StreamingQueryListener):
        """Feeds the named query's progress to :class:`AdmissionControl`."""

        control_: AdmissionControl = control

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            data = json.loads(event.progress.json)
            if data.get("name") != query_name:
                return
            progress = progress_of(data)
            if progress is None:
                log.warning("query %s: a progress without batch id, timestamp, duration or rows: skipped", query_name)
                return
            try:
                with lock:
                    if not stopped:
                        control.on_progress(progress)
            except Exception:  # admission never stops the query; the last rate stays
                log.exception("query %s: admission failed on batch %d", query_name, progress.batch_id)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

        def stop(self) -> None:
            nonlocal stopped
            spark.streams.removeListener(self)
            with lock:
                stopped = True
                sink.close()

    listener = AdmissionListener()
    spark.streams.addListener(listener)
    return listener
