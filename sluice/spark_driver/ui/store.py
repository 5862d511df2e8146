"""What the streaming page shows, kept in memory and bounded: batches, their blocks, rate decisions.

:class:`StreamingStore` is a ``StreamingListener`` (``on_batch_generated/submitted/started/
completed``) and keeps the last ``retained_batches`` batches, as Spark's
``spark.streaming.ui.retainedBatches`` (1000) does, so a driver that runs for weeks holds a fixed
amount.  Rate decisions arrive through :class:`RecordedController`, a stand-in for an estimator's
``RateController`` that passes every call on and notes each rate it answers, with where it came
from (a completed batch or an in-flight sample) and a ``reason`` when the controller or estimator
gives one.  The tracker's status is fetched at most once per ``status_ttl_s`` whatever the number
of open pages.

Every change (a batch put, a batch let go, a decision noted) takes the next number of a version
counter, so a page can ask for what changed since the version it holds (:meth:`StreamingStore.changes`)
instead of every batch each second; the answer is found from the newest change back, so it costs
what changed, not what is kept.

Every method is safe from any thread (job threads post batches, the sampler posts decisions, the
HTTP thread reads); readers get copies.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from sluice.spark_driver.batch import BatchInfo

RETAINED_BATCHES = 1000  # Spark's spark.streaming.ui.retainedBatches
RETAINED_DECISIONS = 2000
BLOCKS_SHOWN = 200  # a batch's detail lists at most this many blocks (and says how many there were)


@dataclass(frozen=True)
class Decision:
    """One rate an estimator answered: ``trigger`` is ``batch`` or ``in-flight``; ``reason`` is the
    estimator's or controller's own word for it, when it gives one."""

    time_ms: int
    stream: str
    rate: float
    previous: float | None
    trigger: str
    reason: str | None


@dataclass
class BatchBlocks:
    """A batch's input: its first blocks, how many there were and were left out, records per receiver."""

    shown: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0
    skipped: int = 0
    by_receiver: dict[str, int] = field(default_factory=dict)


def blocks_of(batch: Any) -> BatchBlocks:
    """The blocks of a :class:`~sluice.spark_driver.batch.Batch` as the page lists them, read from
    its columns when it has them (no block object built) and bounded by :data:`BLOCKS_SHOWN`."""
    blocks = batch.blocks
    skipped = int(batch.metadata.get("skipped_blocks", 0) or 0)
    rows: Iterable[tuple[Any, ...]]
    if hasattr(blocks, "block_ids"):
        rows = zip(blocks.stream_ids, blocks.block_ids, blocks.receivers, blocks.num_records, blocks.locations)
    else:
        rows = ((b.stream_id, b.block_id, b.receiver_id, b.num_records, b.location) for b in blocks)
    out = BatchBlocks(skipped=skipped)
    for stream_id, block_id, receiver, records, location in rows:
        out.count += 1
        out.by_receiver[receiver] = out.by_receiver.get(receiver, 0) + int(records)
        if len(out.shown) < BLOCKS_SHOWN:
            out.shown.append(
                {
                    "streamId": stream_id,
                    "blockId": block_id,
                    "receiverId": receiver,
                    "numRecords": records,
                    "location": location,
                }
            )
    return out


@dataclass
class Changes:
    """What changed after a version, oldest change first, at most the ``limit`` asked for.

    ``version`` is where the next request starts; ``more`` says changes past it are already there;
    ``reset`` says the version asked for is not this store's (a restarted driver, or changes too
    old to tell), so the answer starts from nothing and the reader drops what it holds.
    """

    version: int
    more: bool
    reset: bool
    batches: list[tuple[BatchInfo, BatchBlocks | None]]
    removed: list[int]
    decisions: list[Decision]


class StreamingStore:
    """The batches, blocks and rate decisions of one stream, bounded; a ``StreamingListener``.

    :param batch_interval_ms: the batch interval (Spark's ``batchDuration``).
    :param retained_batches: batches kept (the oldest completed go first).
    :param retained_decisions: rate decisions kept.
    :param tracker_status: returns the tracker's ``status`` reply (``None`` when there is no tracker).
    :param status_ttl_s: the tracker is asked at most this often.
    """

    def __init__(
        self,
        batch_interval_ms: int,
        *,
        retained_batches: int = RETAINED_BATCHES,
        retained_decisions: int = RETAINED_DECISIONS,
        tracker_status: Callable[[], Mapping[str, Any] | None] | None = None,
        tracker_address: str | None = None,
        status_ttl_s: float = 1.0,
    ) -> None:
        self.batch_interval_ms = batch_interval_ms
        self.start_time_ms = int(time.time() * 1000)
        self.retained_batches = retained_batches
        self.tracker_address = tracker_address
        self._tracker_status = tracker_status
        self._status_ttl_s = status_ttl_s
        self._lock = threading.Lock()
        self._batches: OrderedDict[int, BatchInfo] = OrderedDict()
        self._blocks: dict[int, BatchBlocks] = {}
        self.retained_decisions = retained_decisions
        self._decisions: deque[tuple[int, Decision]] = deque(maxlen=retained_decisions)
        self._version = 0
        self._changed: dict[int, int] = {}  # batch time -> version of its last change (the order of _batches)
        self._removed: deque[tuple[int, int]] = deque(maxlen=retained_batches)  # (version, batch time)
        self._floor = 0  # a reader behind this version may have missed a removal no longer listed
        self._completed = 0
        self._processed_records = 0
        self._received_records = 0
        self._status: tuple[float, Mapping[str, Any] | None, str | None] = (-1e9, None, None)
        self._status_lock = threading.Lock()

    # -- StreamingListener ---------------------------------------------------------------------

    def on_batch_generated(self, batch: Any) -> None:
        blocks = blocks_of(batch)
        with self._lock:
            self._blocks[batch.time_ms] = blocks
            if batch.time_ms in self._batches:
                self._touch(batch.time_ms)

    def on_batch_submitted(self, info: BatchInfo) -> None:
        with self._lock:
            if info.batch_time_ms not in self._batches:
                self._received_records += info.num_records
            self._put(info)

    def on_batch_started(self, info: BatchInfo) -> None:
        with self._lock:
            self._put(info)

    def on_batch_completed(self, info: BatchInfo) -> None:
        with self._lock:
            if info.batch_time_ms not in self._batches:
                self._received_records += info.num_records
            self._completed += 1
            if info.status == "succeeded":
                self._processed_records += info.num_records
            self._put(info)

    def _next_version(self) -> int:
        self._version += 1
        return self._version

    def _touch(self, batch_time_ms: int) -> None:
        self._batches.move_to_end(batch_time_ms)
        self._changed[batch_time_ms] = self._next_version()

    def _put(self, info: BatchInfo) -> None:
        self._batches[info.batch_time_ms] = info
        self._touch(info.batch_time_ms)
        while len(self._batches) > self.retained_batches:
            oldest = next((t for t, b in self._batches.items() if b.processing_end_ms is not None), None)
            if oldest is None:
                break
            del self._batches[oldest]
            del self._changed[oldest]
            self._blocks.pop(oldest, None)
            if len(self._removed) == self._removed.maxlen:
                self._floor = self._removed[0][0]
            self._removed.append((self._next_version(), oldest))

    # -- rate decisions ------------------------------------------------------------------------

    def record_decision(self, decision: Decision) -> None:
        with self._lock:
            self._decisions.append((self._next_version(), decision))

    def latest_rate(self, stream: str) -> float | None:
        with self._lock:
            return next((d.rate for _, d in reversed(self._decisions) if d.stream == stream), None)

    # -- readers -------------------------------------------------------------------------------

    def batches(self) -> list[tuple[BatchInfo, BatchBlocks | None]]:
        """The retained batches, oldest first, each with its blocks when known."""
        with self._lock:
            return [(info, self._blocks.get(t)) for t, info in sorted(self._batches.items())]

    def batch(self, batch_time_ms: int) -> tuple[BatchInfo, BatchBlocks | None] | None:
        with self._lock:
            info = self._batches.get(batch_time_ms)
            return None if info is None else (info, self._blocks.get(batch_time_ms))

    def decisions(self) -> list[Decision]:
        with self._lock:
            return [d for _, d in self._decisions]

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def changes(self, since: int, limit: int, epoch: int | None = None) -> Changes:
        """The batches put, the batches let go and the decisions noted after version ``since``, the
        oldest ``limit`` of them.  ``epoch`` is the :attr:`start_time_ms` the reader's version came
        from; another one (a driver restarted since) answers from nothing, as ``since`` 0 does."""
        with self._lock:
            stale = (epoch is not None and epoch != self.start_time_ms) or since > self._version
            reset = since != 0 and (stale or since < self._floor)
            if reset:
                since = 0
            found: list[tuple[int, str, Any]] = []
            for t in reversed(self._batches):  # newest change first: stop at the first one already seen
                if self._changed[t] <= since:
                    break
                found.append((self._changed[t], "batch", t))
            for version, decision in reversed(self._decisions):
                if version <= since:
                    break
                found.append((version, "decision", decision))
            for version, t in reversed(self._removed if since else ()):  # from nothing: nothing to remove
                if version <= since:
                    break
                found.append((version, "removed", t))
            found.sort(key=itemgetter(0))
            more = len(found) > limit
            found = found[:limit]
            return Changes(
                version=found[-1][0] if more else self._version,
                more=more,
                reset=reset,
                batches=[(self._batches[t], self._blocks.get(t)) for _, kind, t in found if kind == "batch"],
                removed=[t for _, kind, t in found if kind == "removed"],
                decisions=[d for _, kind, d in found if kind == "decision"],
            )

    def totals(self) -> dict[str, int]:
        """Since the start, retained or not: completed batches, processed and received records."""
        with self._lock:
            return {
                "completed": self._completed,
                "processed_records": self._processed_records,
                "received_records": self._received_records,
            }

    def tracker(self) -> tuple[Mapping[str, Any] | None, str | None]:
        """The tracker's last ``status`` reply (asked again once it is ``status_ttl_s`` old) and the
        error of the last attempt, if it failed; ``(None, None)`` without a tracker."""
        if self._tracker_status is None:
            return None, None
        with self._status_lock:
            fetched, status, error = self._status
            if time.monotonic() - fetched >= self._status_ttl_s:
                try:
                    status, error = self._tracker_status(), None
                except Exception as exc:  # noqa: BLE001 - the page says the tracker is away, in one line
                    error = f"{type(exc).__name__}: {exc}"
                self._status = (time.monotonic(), status, error)
            return status, error


class RecordedController:
    """An estimator's ``RateController`` that notes in ``store`` every rate it answers.

    Everything else (``latest_rate``, ``wants_signals``, ``close`` ...) goes to the controller as it
    is, so the rate loop and the in-flight sampler cannot tell the difference.  The ``reason`` is
    read where a controller may state it: an attribute ``reason`` of what it returned, its own
    ``last_reason``, or its estimator's.
    """

    def __init__(self, controller: Any, store: StreamingStore, stream: str) -> None:
        self._controller = controller
        self._store = store
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller, name)

    def on_batch_completed(self, batch_info: Any) -> Any:
        before = self._store.latest_rate(self._stream)
        result = self._controller.on_batch_completed(batch_info)
        self._note(result, before, "batch", getattr(batch_info, "processing_end_ms", None))
        return result

    def on_in_flight(self, signals: Any) -> Any:
        before = self._store.latest_rate(self._stream)
        result = self._controller.on_in_flight(signals)
        self._note(result, before, "in-flight", getattr(signals, "time_ms", None))
        return result

    def _note(self, result: Any, before: float | None, trigger: str, time_ms: Any) -> None:
        rate = getattr(result, "rate", result)
        if not isinstance(rate, (int, float)) or isinstance(rate, bool):
            return
        reason = getattr(result, "reason", None) or getattr(self._controller, "last_reason", None)
        reason = reason or getattr(getattr(self._controller, "estimator", None), "last_reason", None)
        stamp = int(time_ms) if isinstance(time_ms, (int, float)) else int(time.time() * 1000)
        self._store.record_decision(
            Decision(stamp, self._stream, float(rate), before, trigger, None if reason is None else str(reason))
        )
