"""``DirectKafkaSource``: the driver's :class:`~sluice.spark_driver.source.BatchSource` for direct Kafka mode.

Spark's ``DirectKafkaInputDStream.compute`` in the shape of Sluice's source protocol: each batch
asks the brokers for the latest offsets, bounds each partition's advance with the lag-weighted
rate (:mod:`sluice.kafka.offsets`), records the ranges in the checkpoint *before* handing
the batch out, and builds an RDD with one task per Kafka partition.  A completed batch is dropped
from the checkpoint and the offsets before the oldest batch still running are committed to the
group, so neither a kill nor concurrent jobs finishing out of order can skip a record.

Where partitions start: the checkpoint when there is one (partitions it does not know, added while
the driver was down, from the group's commit, else the earliest offset); without a checkpoint, the
group's committed offsets, else ``auto_offset_reset``.  Partitions added while running start at
their earliest offset.  The starting offsets are checkpointed at once, so ``latest`` means the
latest at the first start, not at every restart.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sluice.errors import InvalidArgument
from sluice.kafka.offsets import (
    DataLossError,
    OffsetRange,
    Offsets,
    PerPartitionLimit,
    TopicPartition,
    clamp,
    data_loss,
    lag,
    max_messages_per_partition,
    offset_ranges,
)
from sluice.kafka.offsets_client import KafkaOffsets, KafkaOffsetsError, KafkaOffsetsRefused
from sluice.kafka.topics import TopicSelection, subscribe_pattern
from sluice.settings import KafkaSettings
from sluice.spark_driver.bad_record_counts import BadRecordCounts
from sluice.spark_driver.block_stores import store_options
from sluice.spark_driver.direct import checkpoint as ckpt
from sluice.spark_driver.direct import metrics
from sluice.spark_driver.direct.reader import DEFAULT_CHUNK, DEFAULT_POLL_TIMEOUT_MS, kafka_batch
from sluice.spark_driver.direct.sampling import bound_in_offsets, sample
from sluice.spark_driver.source import SourceContext, SourceError, SourceRefused

if TYPE_CHECKING:  # pragma: no cover
    from sluice.spark_driver.batch import Batch, BatchInfo

log = logging.getLogger(__name__)

_DEFAULTS = KafkaSettings()  # the schema's kafka.* and driver.checkpoint_dir defaults


class DirectKafkaSource:
    """Offset ranges computed on the driver, read by Spark tasks; see the module doc.

    Every argument left ``None`` is taken from ``SourceContext.options`` on ``start`` (the schema
    key of its :class:`~sluice.settings.KafkaSettings` field), else that key's default.  ``max_rate_per_partition`` and
    ``min_rate_per_partition`` may be per-partition mappings or functions (Spark's
    ``PerPartitionConfig``); ``topic_weights`` shares each batch among topics
    (:func:`~sluice.kafka.offsets.topic_shares`).
    """

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        topics: str | list[str] | None = None,
        group_id: str | None = None,
        auto_offset_reset: str | None = None,
        *,
        checkpoint_dir: str | None = None,
        max_rate_per_partition: PerPartitionLimit | None = None,
        min_rate_per_partition: PerPartitionLimit | None = None,
        topic_weights: Mapping[str, float] | None = None,
        limits_count: str | None = None,
        max_bytes_per_batch: int | None = None,
        max_retries: int | None = None,
        client_options: Mapping[str, Any] | None = None,
        topic_pattern: str | None = None,
        fail_on_data_loss: bool | None = None,
        stream_id: int = 0,
        chunk: int = DEFAULT_CHUNK,
        poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS,
        retry_backoff_ms: int = 200,
        bad_records: str = "fail",
        dead_letter: str = "",
        dead_letter_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._given = {
            "bootstrap_servers": bootstrap_servers,
            "topics": topics,
            "group_id": group_id,
            "auto_offset_reset": auto_offset_reset,
            "checkpoint_dir": checkpoint_dir,
            "max_rate_per_partition": max_rate_per_partition,
            "min_rate_per_partition": min_rate_per_partition,
            "topic_weights": topic_weights,
            "limits_count": limits_count,
            "max_bytes_per_batch": max_bytes_per_batch,
            "max_retries": max_retries,
            "client_options": client_options,
            "topic_pattern": topic_pattern,
            "fail_on_data_loss": fail_on_data_loss,
        }
        self.stream_id = stream_id
        self.chunk = chunk
        self.poll_timeout_ms = poll_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        # driver.bad_records: what a task does with a record it cannot decode (the receiver path's policy)
        self._bad = BadRecordCounts(bad_records, dead_letter)
        dead = self._bad.dead_letter
        self._dead_letter_options = store_options(dead, dead_letter_options or {}) if dead else None
        self._lock = threading.RLock()
        self._commit_lock = threading.Lock()
        self._group_committed: dict[TopicPartition, int] = {}
        self._kafka: KafkaOffsets | None = None
        self._state: ckpt.DirectCheckpoint | None = None
        self._drain_target: dict[TopicPartition, int] | None = None
        self._rate: float | None = None
        self.spark: Any = None

    @classmethod
    def from_config(cls, config: Any) -> DirectKafkaSource:
        """The source the ``kafka`` and ``driver`` keys of a resolved ``sluice.config.Config`` describe."""
        return cls(
            **dataclasses.asdict(KafkaSettings.from_config(config)),
            bad_records=config["driver.bad_records"],
            dead_letter=config["driver.dead_letter"],
            dead_letter_options=config["block_store.options"],
        )

    # -- settings --------------------------------------------------------------------------------

    def _resolve(self, options: dict[str, Any], batch_interval_ms: int) -> None:
        driver = dict(options.get("driver", {}))
        s: dict[str, Any] = {}
        for f in dataclasses.fields(KafkaSettings):
            section, name = f.metadata["key"].split(".", 1)
            from_options = options.get(section, {}).get(name)
            s[f.name] = next(
                v for v in (self._given[f.name], from_options, getattr(_DEFAULTS, f.name)) if v is not None
            )
        topics = s["topics"].split(",") if isinstance(s["topics"], str) else list(s["topics"])
        self.topics = tuple(dict.fromkeys(t.strip() for t in topics if t.strip()))
        try:
            self.selection = (
                subscribe_pattern(s["topic_pattern"]) if s["topic_pattern"] else TopicSelection(topics=self.topics)
            )
        except InvalidArgument as exc:
            raise SourceError(f"direct kafka: kafka.topic{'_pattern' if s['topic_pattern'] else ''}: {exc}") from None
        if self.selection.pattern is not None:
            self.topics = ()  # the topics are whatever matches, now and later
        for key, allowed in (("auto_offset_reset", ("earliest", "latest")), ("limits_count", ("offsets", "records"))):
            if s[key] not in allowed:
                raise SourceError(
                    f"direct kafka: kafka.{key} = {s[key]!r} is not allowed: expected {' or '.join(allowed)}"
                )
        self.count_records = s["limits_count"] == "records"
        self.max_bytes_per_batch = int(s["max_bytes_per_batch"])
        self.bootstrap_servers: str = s["bootstrap_servers"]
        self.group_id: str = s["group_id"]
        self.auto_offset_reset: str = s["auto_offset_reset"]
        self.max_rate_per_partition: PerPartitionLimit = s["max_rate_per_partition"]
        self.min_rate_per_partition: PerPartitionLimit = s["min_rate_per_partition"]
        try:
            self.topic_weights = self.selection.weights(s["topic_weights"], "kafka.topic_weights") or None
        except InvalidArgument as exc:
            raise SourceError(f"direct kafka: {exc}") from None
        self.max_retries: int = int(s["max_retries"])
        self.fail_on_data_loss = bool(s["fail_on_data_loss"])
        self.client_options: dict[str, Any] = dict(s["client_options"])
        self.checkpoint_path = ckpt.checkpoint_path(s["checkpoint_dir"])
        self.batch_interval_ms = batch_interval_ms
        self.available_now = driver.get("trigger") == "available-now"

    # -- BatchSource -----------------------------------------------------------------------------

    def start(self, context: SourceContext) -> None:
        """Connect, then settle where every partition starts and checkpoint it (module doc)."""
        self.spark = context.spark
        self._resolve(context.options, context.batch_interval_ms)
        self._kafka = KafkaOffsets(
            self.bootstrap_servers,
            self.selection,
            self.group_id,
            client_options=self.client_options,
            max_retries=self.max_retries,
            retry_backoff_ms=self.retry_backoff_ms,
        )
        try:
            self._kafka.start()
            state = ckpt.load(self.checkpoint_path)
            if state is not None and state.group_id != self.group_id:
                raise SourceError(
                    f"direct kafka: checkpoint {self.checkpoint_path} belongs to group "
                    f"{state.group_id!r}, not {self.group_id!r}; use another driver.checkpoint_dir"
                )
            partitions = self._kafka.partitions()
            if state is None:
                state = ckpt.DirectCheckpoint(self.group_id, self.topics)
                state.next_offsets = self._starting_offsets(partitions, self.auto_offset_reset)
            else:
                known_topics = set(state.topics)
                for reset, wanted in (
                    ("earliest", [tp for tp in partitions if tp[0] in known_topics]),
                    (self.auto_offset_reset, [tp for tp in partitions if tp[0] not in known_topics]),
                ):
                    missing = [tp for tp in wanted if tp not in state.next_offsets]
                    state.next_offsets.update(self._starting_offsets(missing, reset))
                state.topics = tuple(dict.fromkeys((*state.topics, *self.topics)))
            self._rate = state.rate
            if self.available_now:
                self._drain_target = self._kafka.latest_offsets()
            with self._lock:
                self._state = state
                self._save()
        except KafkaOffsetsRefused as exc:
            raise SourceRefused(f"direct kafka: cannot start: {exc}") from None
        except (KafkaOffsetsError, ckpt.CheckpointError) as exc:
            raise SourceError(f"direct kafka: cannot start: {exc}") from exc
        log.info(
            "direct kafka: group %s starts at %s (%d batch(es) to recover)",
            self.group_id,
            _fmt(state.next_offsets),
            len(state.pending),
        )

    def preflight(self, options: dict[str, Any], batch_interval_ms: int) -> None:
        """Ask the brokers what :meth:`start` needs of them (the topics' metadata, the group's
        commits) and let go: ``sluice-driver`` calls it before Spark starts, so credentials the
        brokers refuse stop the driver in seconds (:class:`SourceRefused`), not after a JVM start."""
        self._resolve(options, batch_interval_ms)
        kafka = KafkaOffsets(
            self.bootstrap_servers,
            self.selection,
            self.group_id,
            client_options=self.client_options,
            max_retries=0,  # an outage is start()'s to retry and report
        )
        try:
            kafka.start()
            kafka.committed(kafka.partitions())
        except KafkaOffsetsRefused as exc:
            raise SourceRefused(f"direct kafka: cannot start: {exc}") from None
        except KafkaOffsetsError:
            return  # an outage: start() retries it and says so
        finally:
            kafka.close()

    def _starting_offsets(self, partitions: list[TopicPartition], reset: str) -> dict[TopicPartition, int]:
        """The group's commit for each partition, else the earliest or latest offset."""
        assert self._kafka is not None
        if not partitions:
            return {}
        found = self._kafka.committed(partitions)
        rest = [tp for tp in partitions if tp not in found]
        if rest:
            edge = self._kafka.earliest_offsets(rest) if reset == "earliest" else self._kafka.latest_offsets(rest)
            found.update(edge)
        return found

    def latest_published_rate(self, stream_id: int = 0) -> float | None:
        return self._rate

    def recover(self) -> list[int]:
        with self._lock:
            return [p.time_ms for p in self._require().pending]

    def rebuild_batch(self, batch_time_ms: int) -> Batch:
        with self._lock:
            for pending in self._require().pending:
                if pending.time_ms == batch_time_ms:
                    return self._batch(batch_time_ms, pending.ranges)
        raise SourceError(f"direct kafka: batch {batch_time_ms} is not pending in {self.checkpoint_path}")

    def create_batch(self, batch_time_ms: int, rate: float | None) -> Batch | None:
        """Ranges from the current offsets to the rate-bounded latest ones, checkpointed first."""
        state = self._require()
        with self._lock:
            if state.last_batch_ms is not None and batch_time_ms <= state.last_batch_ms:
                return None
            current = dict(state.next_offsets)
        assert self._kafka is not None
        try:
            latest = self._kafka.latest_offsets()
            new = [tp for tp in latest if tp not in current]
            if new:
                current.update(self._kafka.earliest_offsets(new))
                log.info(
                    "direct kafka: new partition(s) %s start at their earliest offset",
                    _fmt({tp: current[tp] for tp in new}),
                )
        except KafkaOffsetsError as exc:
            metrics.OFFSET_REQUEST_FAILURES.inc()
            raise SourceError(f"direct kafka: batch {batch_time_ms}: {exc}") from exc
        if self._drain_target is not None:
            latest = {tp: min(end, self._drain_target.get(tp, current[tp])) for tp, end in latest.items()}
        current = self._check_loss(current, latest)
        rate = self._offsets_rate(rate, current, latest)
        shares = (self.max_rate_per_partition, self.min_rate_per_partition, self.topic_weights)
        limits = max_messages_per_partition(current, latest, rate, self.batch_interval_ms, *shares)
        until = clamp(current, latest, limits)
        ranges = tuple(offset_ranges(current, until))
        with self._lock:
            before = (state.next_offsets, state.last_batch_ms, list(state.pending))
            state.next_offsets = {**current, **until}
            state.last_batch_ms = batch_time_ms
            state.pending.append(ckpt.PendingBatch(batch_time_ms, ranges))
            state.rate = self._rate
            try:
                self._save()  # before anyone sees the batch: a kill from here on re-runs it
            except SourceError:
                state.next_offsets, state.last_batch_ms, state.pending = before
                raise
        for r in ranges:
            labels = (r.topic, str(r.partition))
            metrics.RANGE_RECORDS.labels(*labels).set(r.count)
            metrics.PARTITION_LAG.labels(*labels).set(max(latest[r.topic_partition] - r.until_offset, 0))
        self._show_open_transactions(latest)
        return self._batch(batch_time_ms, ranges)

    def _show_open_transactions(self, latest: Offsets) -> None:
        """Under ``read_committed``: set each partition's records held back by open transactions
        (one more ListOffsets a batch).  A failure leaves the gauges as they were: it is for the
        operator's eyes, and the batch is planned already."""
        assert self._kafka is not None
        try:
            held = self._kafka.open_transaction_records(latest)
        except KafkaOffsetsError as exc:
            log.debug("direct kafka: the high watermarks are not known this batch: %s", exc)
            return
        for (topic, partition), records in held.items():
            metrics.OPEN_TRANSACTION_RECORDS.labels(topic, str(partition)).set(records)

    def _offsets_rate(self, rate: float | None, current: Offsets, latest: Offsets) -> float | None:
        """The rate in offsets/s: in records (``kafka.limits_count``), capped by ``kafka.max_bytes_per_batch``."""
        records = rate * self.batch_interval_ms / 1000 if rate is not None and rate > 0 else None
        if not (self.count_records and records) and self.max_bytes_per_batch <= 0:
            return rate
        found, lags = sample(self.bootstrap_servers, self.client_options, current, latest), lag(current, latest)
        bound = bound_in_offsets(
            records, found, lags, count_records=self.count_records, max_bytes=self.max_bytes_per_batch
        )
        return None if bound is None else bound * 1000 / self.batch_interval_ms

    def _check_loss(self, current: dict[TopicPartition, int], latest: dict[TopicPartition, int]) -> dict:
        """Spark's ``failOnDataLoss`` (``kafka.fail_on_data_loss``): fail the batch, or go on from
        what the log holds (the same cases as ``sluice-kafka``, :func:`.offsets.data_loss`)."""
        assert self._kafka is not None
        try:
            earliest = self._kafka.earliest_offsets([tp for tp in current if tp in latest])
        except KafkaOffsetsError as exc:
            raise SourceError(f"direct kafka: {exc}") from exc
        moved, lost = data_loss(current, earliest, latest)
        if not lost:
            return current
        if self.fail_on_data_loss:
            raise DataLossError(
                f"direct kafka: data lost: {'; '.join(lost)}. Set kafka.fail_on_data_loss = false to go on"
            )
        log.warning("direct kafka: data lost, going on from what the log holds: %s", "; ".join(lost))
        return moved

    def on_batch_completed(self, batch: Batch, info: BatchInfo) -> None:
        """Forget the batch, checkpoint, then commit the offsets before the oldest pending batch."""
        self._bad.completed(info.batch_time_ms)
        state = self._require()
        with self._lock:
            before = len(state.pending)
            state.pending = [p for p in state.pending if p.time_ms != batch.time_ms]
            if len(state.pending) == before:
                log.warning("direct kafka: batch %d completed but was not pending; ignored", batch.time_ms)
                return
            safe = dict(state.next_offsets)
            for pending in state.pending:
                for r in pending.ranges:
                    safe[r.topic_partition] = min(safe.get(r.topic_partition, r.from_offset), r.from_offset)
            state.committed = safe
            state.rate = self._rate
            self._save()
        self._commit_to_group(batch.time_ms)

    def _commit_to_group(self, batch_time_ms: int) -> None:
        """Commit the checkpoint's safe offsets that the group does not have yet.

        Under one lock and from the latest state, so two batches completing at once cannot commit
        an older position after a newer one.  A failed commit is retried with the next batch;
        the checkpoint already holds the offsets, so nothing is lost meanwhile.
        """
        kafka = self._kafka
        if kafka is None:  # stopped meanwhile: the checkpoint has the offsets, the next run commits them
            return
        with self._commit_lock:
            with self._lock:
                target = dict(self._require().committed)
            changed = {tp: o for tp, o in target.items() if self._group_committed.get(tp) != o}
            try:
                kafka.commit(changed)
            except KafkaOffsetsError as exc:
                metrics.COMMIT_FAILURES.inc()
                log.warning("direct kafka: batch %d: %s", batch_time_ms, exc)
                return
            self._group_committed.update(changed)

    def publish_rate(self, rate: float, stream_id: int = 0) -> None:
        """Nothing to publish in direct mode: keep the rate for the next batch and the checkpoint."""
        self._rate = rate

    def has_more_available(self) -> bool:
        """Whether any partition is still short of the latest offsets seen at start."""
        with self._lock:
            state = self._require()
            target = self._drain_target
            if target is None:
                assert self._kafka is not None
                target = self._kafka.latest_offsets()
            return bool(state.pending) or any(state.next_offsets.get(tp, 0) < end for tp, end in target.items())

    def stop(self) -> None:
        kafka, self._kafka = self._kafka, None
        if kafka is not None:
            kafka.close()

    # -- helpers ---------------------------------------------------------------------------------

    def committed_offsets(self) -> dict[TopicPartition, int]:
        """What this source last committed to the group (for tests and status pages)."""
        with self._lock:
            return dict(self._require().committed)

    def _batch(self, batch_time_ms: int, ranges: tuple[OffsetRange, ...]) -> Batch:
        options = {
            "client_options": self.client_options,
            "chunk": self.chunk,
            "poll_timeout_ms": self.poll_timeout_ms,
            "bad_records": self._bad.for_batch(self.spark, batch_time_ms, self._dead_letter_options),
        }
        return kafka_batch(self.spark, batch_time_ms, ranges, self.bootstrap_servers, self.stream_id, **options)

    def _save(self) -> None:
        assert self._state is not None
        try:
            ckpt.save(self.checkpoint_path, self._state)
        except OSError as exc:
            raise SourceError(f"direct kafka: cannot write checkpoint {self.checkpoint_path}: {exc}") from exc

    def _require(self) -> ckpt.DirectCheckpoint:
        if self._state is None:
            raise SourceError("direct kafka: the source is not started")
        return self._state


def _fmt(offsets: Mapping[TopicPartition, int]) -> str:
    return ", ".join(f"{t}/{p}@{o}" for (t, p), o in sorted(offsets.items())) or "(no partitions)"
