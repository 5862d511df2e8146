"""What the user's function gets (``Batch``) and what listeners and the estimator see (``BatchInfo``).

``Batch`` plays the part of the RDD a DStream's ``foreachRDD`` receives, plus what Structured
Streaming's ``foreachBatch`` gives (a DataFrame and the batch id), so code from either ports as it
is: ``to_df()`` has the Kafka source's schema and ``write_json``/``write_parquet`` are idempotent per
batch time, which is what makes a re-run batch (after a driver restart) replace its output instead
of duplicating it.

``BatchInfo`` is Spark's ``BatchInfo``: submission, processing start and end are wall-clock
milliseconds of the driver's clock; the delays are derived from them and ``None`` while unknown.
It has the attributes ``estimators.RateController`` reads (``processing_end_ms``, ``num_records``,
``processing_delay_ms``, ``scheduling_delay_ms``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache, partial
from typing import TYPE_CHECKING, Any

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.records import as_bytes
from sluice.spark_driver.sinks import write_batch_output
from sluice.stages import BatchStamps, now_ms, stage_samples

#: The columns of a DataFrame ``write_kafka`` reads, as Spark's Kafka sink (the topic is an argument).
DF_SINK_COLUMNS = ("key", "value", "headers", "partition")

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import RDD
    from pyspark.sql import DataFrame, SparkSession


def kafka_schema(include_headers: bool = False):
    """Structured Streaming's Kafka source schema; with ``include_headers`` (Spark's
    ``includeHeaders``) also ``headers``: ``array<struct<key: string, value: binary>>``."""
    # pyspark loads only where a schema is built: executors reading blocks need none
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)])
    return StructType(
        [
            StructField("key", BinaryType(), True),
            StructField("value", BinaryType(), True),
            StructField("topic", StringType(), True),
            StructField("partition", IntegerType(), True),
            StructField("offset", LongType(), True),
            StructField("timestamp", TimestampType(), True),
            StructField("timestampType", IntegerType(), True),
            *([StructField("headers", ArrayType(header, True), True)] if include_headers else []),
        ]
    )


def _header_pairs(headers: Any) -> list | None:
    """A record's headers for the ``headers`` column (``key: string``): a key that is not UTF-8
    (kept as bytes in the record) is read as Spark's Kafka source reads it, Java's ``new
    String(bytes, UTF_8)``, every malformed sequence a U+FFFD; None for no headers."""
    if not headers:
        return None
    pairs = list(headers)
    for i, (key, value) in enumerate(pairs):
        if type(key) is bytes:
            pairs[i] = (key.decode("utf-8", "replace"), value)
    return pairs


def record_to_row(record: Any, include_headers: bool = False) -> tuple:
    """One stored record as a Kafka-schema row; plain values (socket, generator) fill ``value`` only.

    With ``include_headers`` the row ends with the headers as a list of ``(key, value)`` pairs (a
    list: a Data Source's Arrow conversion takes no tuple for an array), or None for a record
    without any (as Spark's Kafka source).  Runs inside Spark tasks, so it is a
    module-level function (pickled by reference).
    """
    offset = getattr(record, "offset", None)
    topic = getattr(record, "topic", None)
    if offset is not None and topic is not None:
        ts = record.timestamp_ms
        stamp = datetime.fromtimestamp(ts / 1000.0, tz=UTC) if ts is not None and ts >= 0 else None
        row = (as_bytes(record.key), as_bytes(record.value), topic, record.partition, offset, stamp, 0)
        return (*row, _header_pairs(getattr(record, "headers", ()))) if include_headers else row
    plain = (None, as_bytes(record), None, None, None, None, None)
    return (*plain, None) if include_headers else plain


def kafka_arrow_batch(records: Sequence[Any], include_headers: bool = False) -> Any:
    """Kafka records (``sluice.records.Record``) as one ``pyarrow.RecordBatch`` of
    :func:`kafka_schema`: the values :func:`record_to_row` gives, a column at a time.

    A Python data source whose ``read`` yields tuples has PySpark convert every field of every row
    in Python (some 20 µs a record); record batches go to the JVM as they are.  Runs inside Spark
    tasks (pyarrow is there wherever a Python data source runs).
    """
    # pyarrow loads only where a data source builds Arrow batches
    import pyarrow as pa

    schema = _arrow_schema(include_headers)
    stamps = [None if r.timestamp_ms is None or r.timestamp_ms < 0 else r.timestamp_ms * 1000 for r in records]
    columns: list[list[Any]] = [
        [as_bytes(r.key) for r in records],
        [as_bytes(r.value) for r in records],
        [r.topic for r in records],
        [r.partition for r in records],
        [r.offset for r in records],
        stamps,  # microseconds, UTC
        [0] * len(records),
    ]
    if include_headers:
        columns.append([_header_pairs(r.headers) for r in records])
    arrays = [pa.array(values, type=f.type) for values, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@cache
def _arrow_schema(include_headers: bool) -> Any:
    """:func:`kafka_schema` in Arrow, as PySpark's data source worker expects a batch's schema."""
    # pyspark loads only where a schema is built: executors reading blocks need none
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


@dataclass
class Batch:
    """One batch: its time, its RDD (one partition per block or Kafka partition) and its input.

    ``num_records`` is what the input reported (sum of the blocks' record counts in receiver mode,
    the offset ranges' sizes in direct mode), as Spark's ``StreamInputInfo``; it is not recounted.
    ``stream_records`` splits it per input stream for the per-stream rate controllers.
    In receiver mode ``blocks`` is the allocation's :class:`~sluice.block_columns.BlockColumns` and
    ``offset_ranges`` their ranges: their objects are built on first use, so a function that does
    not read them does not pay for them.
    """

    time_ms: int
    rdd: RDD
    spark: SparkSession
    num_records: int = 0
    blocks: Sequence[ReceivedBlockInfo] = ()
    offset_ranges: Sequence[OffsetRange] = ()
    stream_records: dict[int, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    #: The driver's stamps of where the batch's time goes (:mod:`sluice.stages`).
    stamps: BatchStamps = field(default_factory=BatchStamps)
    #: Receiver mode: the accumulator its tasks note their start in (``EarliestParam``); None: none.
    task_started: Any = None
    #: Each ``write_kafka`` of the batch, every attempt's, in order: what the page shows of its
    #: output (:func:`~sluice.spark_driver.kafka_sink.output_state`).
    outputs: list[dict[str, Any]] = field(default_factory=list)

    def stage_samples(self) -> dict[str, list[int]]:
        """Per stage, the durations (ms) of each block's first and last records (:mod:`sluice.stages`);
        the batch's first task start read from its tasks' accumulator first."""
        if self.task_started is not None and self.task_started.value:
            self.stamps.task_start = int(self.task_started.value)
        metadata = getattr(self.blocks, "metadata", None)
        if metadata is None:  # blocks as objects (a test's, a rebuilt batch's)
            metadata = [b.metadata for b in self.blocks]
        return stage_samples(metadata, self.stamps)

    @property
    def batch_id(self) -> int:
        """Structured Streaming's ``batchId`` argument: here the batch time, unique and ordered."""
        return self.time_ms

    @property
    def is_empty(self) -> bool:
        """Known to hold no records without running a job: zero records, no blocks, and no offset
        range that holds any (direct mode's idle batch has one empty range per partition; Spark's
        ``KafkaRDD.isEmpty`` answers from its ranges too)."""
        return self.num_records == 0 and not self.blocks and all(r.count == 0 for r in self.offset_ranges)

    def to_df(self, include_headers: bool = False) -> DataFrame:
        """The batch as a DataFrame with the Kafka source's schema (key, value binary; topic;
        partition; offset; timestamp; timestampType; with ``include_headers``, Spark's
        ``includeHeaders``, also ``headers``)."""

        to_row = partial(record_to_row, include_headers=include_headers)
        return self.spark.createDataFrame(self.rdd.map(to_row), kafka_schema(include_headers), verifySchema=False)

    def to_text_df(self, include_headers: bool = False) -> DataFrame:
        """``to_df()`` with key and value cast to strings, as ``CAST(value AS STRING)`` would."""
        return self.to_df(include_headers).selectExpr(
            "CAST(key AS STRING) AS key",
            "CAST(value AS STRING) AS value",
            "topic",
            "partition",
            "offset",
            "timestamp",
            "timestampType",
            *(["headers"] if include_headers else []),
        )

    def write_parquet(self, path: str, df: DataFrame | None = None) -> str | None:
        """Write ``df`` (default ``to_df()``) to ``path/batch_time=<time_ms>/``, replacing a
        previous run of this batch; returns the final directory.  An empty batch (without ``df``)
        writes nothing and returns ``None``: an idle stream ticks every interval, and a directory
        per tick holding only ``_SUCCESS`` adds nothing for a reader but clutter."""

        if df is None and self.is_empty:
            return None
        written = write_batch_output(self.to_df() if df is None else df, path, self.time_ms, "parquet")
        self.stamps.sink_end = now_ms()
        return written

    def write_json(self, path: str, df: DataFrame | None = None) -> str | None:
        """Write ``df`` (default ``to_text_df()``: JSON has no binary type) to
        ``path/batch_time=<time_ms>/``, replacing a previous run of this batch; an empty batch
        (without ``df``) writes nothing, as :meth:`write_parquet`."""

        if df is None and self.is_empty:
            return None
        written = write_batch_output(self.to_text_df() if df is None else df, path, self.time_ms, "json")
        self.stamps.sink_end = now_ms()
        return written

    def write_kafka(
        self,
        topic: str,
        df: DataFrame | None = None,
        *,
        bootstrap_servers: str,
        client: Mapping[str, Any] | None = None,
        mode: str = "exactly_once",
        app: str | None = None,
    ) -> None:
        """Write the batch's records as they came (key, value, headers), or ``df``'s ``key``,
        ``value``, ``headers`` and ``partition`` columns as Spark's Kafka sink reads them, to
        ``topic``, one transaction per task (:mod:`sluice.spark_driver.kafka_sink`).

        Under ``exactly_once`` (the default) a re-run of this batch, or a retried or speculative
        task, leaves each record once for a ``read_committed`` reader; ``at_least_once`` is a
        plain idempotent producer (``acks=all``) and writes a re-run's records again.  ``client``
        is a ``[kafka.client]`` table; ``app`` (default: ``spark.app.name``) names the
        transactional ids and must be unique to this application.  A ``df`` must put the same rows
        in the same partition index on a re-run (the batch's own RDD does).  An empty batch
        (without ``df``) writes nothing.
        """
        # the sink and its producer load only when a batch writes to Kafka
        from sluice.spark_driver.kafka_sink import SinkSettings, check_outcomes, output_state, write_rdd

        if df is None and self.is_empty:
            return
        settings = SinkSettings(
            topic,
            bootstrap_servers,
            app or str(self.spark.sparkContext.appName),
            self.time_ms,
            mode,
            dict(client or {}),
        )
        if df is None:
            outcomes = write_rdd(self.rdd, settings, from_df=False)
        else:
            columns = [c for c in DF_SINK_COLUMNS if c in df.columns]
            outcomes = write_rdd(df.select(*columns).rdd, settings, from_df=True)
        self.outputs.append(output_state(settings, outcomes))
        check_outcomes(settings, outcomes)
        self.stamps.sink_end = now_ms()  # every task's transaction committed


@dataclass(frozen=True)
class BatchInfo:
    """Spark's ``BatchInfo``: the timing of one batch (milliseconds, driver wall clock).

    ``status`` is ``"submitted"``, ``"running"``, ``"succeeded"``, ``"skipped"`` (failed for good
    under ``on_batch_failure="skip"``) or ``"failed"``; ``attempts`` counts runs of the job and
    ``failure`` names the last error.
    """

    batch_time_ms: int
    num_records: int
    submission_time_ms: int
    processing_start_ms: int | None = None
    processing_end_ms: int | None = None
    stream_records: dict[int, int] = field(default_factory=dict)
    status: str = "submitted"
    attempts: int = 0
    failure: str | None = None
    #: Direct mode: the batch's Kafka offset ranges (Spark's ``StreamInputInfo`` "offsets" metadata).
    offset_ranges: tuple[OffsetRange, ...] = ()
    #: Receiver mode, once completed: per stage of a record's way, the p50 and p99 ms of the batch's
    #: records (``{"buffer": {"p50": 98.0, "p99": 197.0}, ...}``, :mod:`sluice.stages`); empty when
    #: its blocks carry no stamps.
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Once completed: the batch's ``write_kafka`` outputs (``Batch.outputs``), for the page.
    outputs: tuple[dict[str, Any], ...] = ()

    @property
    def scheduling_delay_ms(self) -> int | None:
        """Time the batch waited for a job thread (start - submission)."""
        if self.processing_start_ms is None:
            return None
        return self.processing_start_ms - self.submission_time_ms

    @property
    def processing_delay_ms(self) -> int | None:
        """Time the user's function ran, retries included (end - start)."""
        if self.processing_start_ms is None or self.processing_end_ms is None:
            return None
        return self.processing_end_ms - self.processing_start_ms

    @property
    def total_delay_ms(self) -> int | None:
        """Scheduling plus processing delay, as Spark's ``totalDelay``."""
        scheduling, processing = self.scheduling_delay_ms, self.processing_delay_ms
        if scheduling is None or processing is None:
            return None
        return scheduling + processing

    def for_stream(self, stream_id: int) -> BatchInfo:
        """This batch as one stream's rate controller should see it (that stream's records)."""
        if not self.stream_records:
            return self
        return replace(self, num_records=self.stream_records.get(stream_id, 0))

    def with_(self, **changes: Any) -> BatchInfo:
        return replace(self, **changes)

    def to_wire(self) -> dict[str, Any]:
        """The msgpack map sent with ``batch_completed`` (string keys, plain values)."""
        return {
            "batch_time_ms": self.batch_time_ms,
            "num_records": self.num_records,
            "submission_time_ms": self.submission_time_ms,
            "processing_start_ms": self.processing_start_ms,
            "processing_end_ms": self.processing_end_ms,
            "scheduling_delay_ms": self.scheduling_delay_ms,
            "processing_delay_ms": self.processing_delay_ms,
            "total_delay_ms": self.total_delay_ms,
            "stream_records": {str(k): v for k, v in self.stream_records.items()},
            "status": self.status,
            "attempts": self.attempts,
            "failure": self.failure,
            "offset_ranges": [r.to_wire() for r in self.offset_ranges],
            **({"stages": self.stages} if self.stages else {}),
        }
