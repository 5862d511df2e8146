"""The streaming page's JSON, shaped like Spark's REST API for streaming (``/api/v1/streaming``).

Field names follow ``org.apache.spark.status.api.v1.streaming`` (``StreamingStatistics``,
``BatchInfo``, ``ReceiverInfo`` in Spark's ``streaming/.../status/api/v1/streaming/api.scala``):
times are Spark's ``yyyy-MM-dd'T'HH:mm:ss.SSS'GMT'`` strings, durations milliseconds, an unknown
value ``null``.  What Spark has no field for (retries, skipped blocks, a receiver's lag, the rate
decisions, the tracker) is added under names of its own, listed in docs/reference/ui-api.md.
Pure functions of what the store holds: the HTTP shell only routes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sluice.spark_driver.batch import BatchInfo
from sluice.spark_driver.ui.store import BatchBlocks, Changes, Decision

#: Spark's batch status for Sluice's: a batch is queued until a job thread takes it.
SPARK_STATUS = {"submitted": "QUEUED", "running": "PROCESSING"}
STATUS_FILTERS = ("completed", "processing", "queued")
HIDDEN_STATUS = ("receivers", "streams", "pending_batches")  # shown elsewhere, or bulky


def spark_date(ms: int | float | None) -> str | None:
    """Epoch milliseconds as Spark's JSON dates (``2026-11-26T18:02:03.123GMT``)."""
    if ms is None:
        return None
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000))
    return f"{stamp}.{int(ms) % 1000:03d}GMT"


def batch_status(info: BatchInfo) -> str:
    return SPARK_STATUS.get(info.status, "COMPLETED")


def batch_json(info: BatchInfo, blocks: BatchBlocks | None, interval_ms: int) -> dict[str, Any]:
    """Spark's ``BatchInfo`` (one output operation: the batch function) plus Sluice's fields."""
    done = info.processing_end_ms is not None
    failed = done and info.status != "succeeded"
    return {
        "batchId": info.batch_time_ms,
        "batchTime": spark_date(info.batch_time_ms),
        "status": batch_status(info),
        "batchDuration": interval_ms,
        "inputSize": info.num_records,
        "schedulingDelay": info.scheduling_delay_ms,
        "processingTime": info.processing_delay_ms,
        "totalDelay": info.total_delay_ms,
        "numActiveOutputOps": 1 if info.status == "running" else 0,
        "numCompletedOutputOps": 1 if done and not failed else 0,
        "numFailedOutputOps": 1 if failed else 0,
        "numTotalOutputOps": 1,
        "firstFailureReason": info.failure,
        # Sluice's own
        "batchTimeMs": info.batch_time_ms,
        "outcome": info.status,
        "retries": max(0, info.attempts - 1),
        "numBlocks": None if blocks is None else blocks.count,
        "skippedBlocks": None if blocks is None else blocks.skipped,
        "inputRate": info.num_records * 1000.0 / interval_ms,
        # per stage of a record's way (sluice.stages), in order: {"stage", "p50", "p99"} in ms
        "stages": [{"stage": name, **times} for name, times in info.stages.items()],
    }


def batch_detail(info: BatchInfo, blocks: BatchBlocks | None, interval_ms: int) -> dict[str, Any]:
    """One batch with its blocks (the first ones, ``numBlocks`` says how many) and per-stream records."""
    detail = batch_json(info, blocks, interval_ms)
    detail["submissionTime"] = spark_date(info.submission_time_ms)
    detail["processingStartTime"] = spark_date(info.processing_start_ms)
    detail["processingEndTime"] = spark_date(info.processing_end_ms)
    detail["streamRecords"] = {str(k): v for k, v in info.stream_records.items()}
    detail["blocks"] = [] if blocks is None else blocks.shown
    detail["recordsByReceiver"] = {} if blocks is None else dict(blocks.by_receiver)
    # each write_kafka of the batch, every attempt's (kafka_sink.output_state): topic, mode,
    # records, and its tasks by outcome
    detail["outputs"] = [dict(output) for output in info.outputs]
    return detail


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _mean_ms(values: Sequence[int]) -> int | None:
    mean = _mean(values)
    return None if mean is None else round(mean)


def statistics_json(
    batches: Sequence[BatchInfo],
    totals: Mapping[str, int],
    receivers: Sequence[Mapping[str, Any]],
    *,
    start_time_ms: int,
    interval_ms: int,
) -> dict[str, Any]:
    """Spark's ``StreamingStatistics``: averages over the retained completed batches; ``receivers``
    as :func:`receiver_entries` gives them."""
    completed = [b for b in batches if b.processing_end_ms is not None]
    active = len(batches) - len(completed)
    live = sum(1 for r in receivers if r.get("live"))
    return {
        "startTime": spark_date(start_time_ms),
        "batchDuration": interval_ms,
        "numReceivers": len(receivers),
        "numActiveReceivers": live,
        "numInactiveReceivers": len(receivers) - live,
        "numTotalCompletedBatches": totals["completed"],
        "numRetainedCompletedBatches": len(completed),
        "numActiveBatches": active,
        "numProcessedRecords": totals["processed_records"],
        "numReceivedRecords": totals["received_records"],
        "avgInputRate": _mean([b.num_records * 1000.0 / interval_ms for b in completed]),
        "avgSchedulingDelay": _mean_ms([d for b in completed if (d := b.scheduling_delay_ms) is not None]),
        "avgProcessingTime": _mean_ms([d for b in completed if (d := b.processing_delay_ms) is not None]),
        "avgTotalDelay": _mean_ms([d for b in completed if (d := b.total_delay_ms) is not None]),
    }


def receiver_entries(status: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The receivers of a tracker ``status`` reply, in receiver id order (the order pages are cut in)."""
    raw = (status or {}).get("receivers") or {}
    entries = list(raw.values()) if isinstance(raw, Mapping) else list(raw)
    return sorted((r for r in entries if isinstance(r, Mapping)), key=lambda r: str(r.get("receiver_id", "")))


def receivers_json(
    entries: Sequence[Mapping[str, Any]],
    batches: Sequence[tuple[BatchInfo, BatchBlocks | None]],
    interval_ms: int,
    *,
    event_rates: bool = True,
) -> list[dict[str, Any]]:
    """Spark's ``ReceiverInfo`` for each of ``entries`` (see :func:`receiver_entries`), with its
    event rates per batch from the blocks it stored (records per batch interval); missing fields are
    ``null``.  ``event_rates=False`` leaves the per-batch list out (``eventRates`` is ``null``): the
    average alone costs no list of a thousand pairs per receiver."""
    with_blocks = [(info.batch_time_ms, blocks) for info, blocks in batches if blocks is not None]
    out = []
    for r in entries:
        rid = str(r.get("receiver_id", ""))
        rates = [(t, blocks.by_receiver.get(rid, 0) * 1000.0 / interval_ms) for t, blocks in with_blocks]
        stream = r.get("stream_id")
        out.append(
            {
                "streamId": stream,
                "streamName": None if stream is None else f"stream-{stream}",
                "isActive": r.get("live"),
                "executorId": rid or None,
                "executorHost": r.get("host"),
                "lastErrorTime": None,
                "lastErrorMessage": r.get("last_error"),
                "lastError": r.get("last_error"),
                "avgEventRate": _mean([rate for _, rate in rates]),
                "eventRates": [list(pair) for pair in rates] if event_rates else None,
                # Sluice's own
                "receiverId": rid or None,
                "rate": r.get("rate"),
                "lag": r.get("lag"),
                "openTransactionRecords": r.get("open_transaction_records"),
                "incarnation": r.get("incarnation"),
                "lastSeen": spark_date(r.get("last_seen_ms")),
            }
        )
    return out


def tracker_json(status: Mapping[str, Any] | None, error: str | None, address: str | None) -> dict[str, Any]:
    """The tracker as the driver last saw it: every field of its ``status`` reply but the ones other
    endpoints show (leader and standby among them when the tracker reports them)."""
    fields = {k: v for k, v in (status or {}).items() if k not in HIDDEN_STATUS}
    return {"address": address, "reachable": status is not None and error is None, "error": error, "status": fields}


def changes_json(changes: Changes, interval_ms: int, epoch: int, retained_rates: int) -> dict[str, Any]:
    """What changed since a version (Sluice's ``changes``): the batches put (in change order), the
    batch ids let go, the decisions noted, and the cursor to ask from next."""
    return {
        "epoch": epoch,
        "version": changes.version,
        "more": changes.more,
        "reset": changes.reset,
        "batches": [batch_json(info, blocks, interval_ms) for info, blocks in changes.batches],
        "removed": changes.removed,
        "rates": decisions_json(changes.decisions),
        "retainedRates": retained_rates,
    }


def decisions_json(decisions: Sequence[Decision]) -> list[dict[str, Any]]:
    return [
        {
            "time": spark_date(d.time_ms),
            "timeMs": d.time_ms,
            "stream": d.stream,
            "rate": d.rate,
            "previousRate": d.previous,
            "trigger": d.trigger,
            "reason": d.reason,
        }
        for d in decisions
    ]
