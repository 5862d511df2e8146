"""Time behind per stream: the age of the oldest record the driver has not finished.

Records behind (the receivers' Kafka lag, the queued records) say how much is left, not how late
it is.  The oldest unprocessed record of a stream is in one of two places:

- a block the driver has not finished (queued, or in a batch allocated and not completed), whose
  metadata carries its oldest record's Kafka timestamp (:attr:`ReceivedBlockInfo.oldest_timestamp_ms`);
- still in Kafka behind a receiver that is behind (its rate is throttled): such a receiver reports,
  with its lag, the timestamp of the last record it took (``heartbeat.head_ts_ms``).  The next
  record in Kafka is at most that old, so ``now - head`` bounds the head-of-line age from above,
  and is exact when a real backlog waits there.

Blocks alone would read zero exactly when backpressure keeps the backlog in Kafka, hence both.
Pure: the tracker's state and a clock in, seconds out, tested without sockets.
"""

from __future__ import annotations

from collections.abc import Iterable

from sluice.tracker.server.received_block_tracker import ReceivedBlockTracker
from sluice.tracker.server.registry import ReceiverRegistry


def lag_seconds(block_oldest_ms: Iterable[int], receiver_heads_ms: Iterable[int], now_ms: float) -> float:
    """The age in seconds of the oldest of these timestamps at ``now_ms``; 0 without any.

    A timestamp ahead of ``now_ms`` (a producer's clock ahead of the tracker's) reads 0, not a
    negative age.
    """
    oldest = min((*block_oldest_ms, *receiver_heads_ms), default=None)
    return 0.0 if oldest is None else max(0.0, (now_ms - oldest) / 1000.0)


def stream_lags(tracker: ReceivedBlockTracker, registry: ReceiverRegistry, now_ms: float) -> dict[int, float]:
    """:func:`lag_seconds` of every stream the tracker knows (queued, pending or with receivers).

    A scrape walks the unfinished blocks once; they are bounded by ``tracker.max_queued_blocks``
    per stream plus the pending batches.
    """
    oldest: dict[int, list[int]] = {s: [] for s in (*tracker.stream_ids(), *registry.streams())}
    unfinished = [(s, tracker.get_unallocated_blocks(s)) for s in tracker.stream_ids()]
    for t in tracker.pending_batches():
        unfinished += tracker.get_blocks_of_batch(t).items()
    for stream, blocks in unfinished:
        found = oldest.setdefault(stream, [])
        found += [ts for b in blocks if (ts := b.oldest_timestamp_ms) is not None]
    heads: dict[int, list[int]] = {}
    for stream, receivers in registry.streams().items():
        heads[stream] = [r.head_ts_ms for r in receivers.values() if r.head_ts_ms is not None]
    return {s: lag_seconds(found, heads.get(s, ()), now_ms) for s, found in oldest.items()}
