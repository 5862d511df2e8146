"""The ``status`` reply: bounded in cost and size whatever peers registered.

Built in one pass over streams and one over receivers (the registry indexes receivers by stream),
and every list is cut at :data:`MAX_LISTED` with the full count beside it, so 6,000 receivers with
long peer-chosen strings cost one bounded reply, not a reply per stream of every receiver.  A
receiver connection sees only its own registrations and their streams.
"""

from __future__ import annotations

from itertools import islice

from sluice.block_info import MAX_INT
from sluice.tracker.server.received_block_tracker import ReceivedBlockTracker
from sluice.tracker.server.registry import ReceiverInfo, ReceiverRegistry
from sluice.tracker.wire.messages import StatusReply, StreamStatus

MAX_LISTED = 1_000  # receivers (and streams) listed in one reply; the counts say how many there are
MAX_LISTED_PER_STREAM = 100  # receiver ids listed under one stream


def status(tracker: ReceivedBlockTracker, reg: ReceiverRegistry, own: list[ReceiverInfo] | None = None) -> StatusReply:
    """The full view (driver, admin), or with ``own`` the view of a receiver holding those registrations."""
    counts = tracker.unallocated_counts()
    by_stream = reg.streams()
    if own is None:
        stream_ids = set(counts) | set(by_stream) | set(reg.rates)
        receivers = list(islice(reg.receivers.values(), MAX_LISTED))
        total = len(reg.receivers)
    else:
        stream_ids = {r.stream_id for r in own}
        receivers, total = own, len(own)
    streams: dict[int, StreamStatus] = {}
    for s in sorted(stream_ids)[:MAX_LISTED]:
        blocks, records = counts.get(s, (0, 0))
        peers = by_stream.get(s, {})
        streams[s] = {
            "unallocated_blocks": blocks,
            "unallocated_records": min(records, MAX_INT),
            "rate": reg.rates.get(s),
            "receivers": sorted(islice(peers, MAX_LISTED_PER_STREAM)),
            "receiver_count": len(peers),
        }
    reply: StatusReply = {
        "streams": streams,
        "stream_count": len(stream_ids),
        "receivers": {r.receiver_id: r.to_wire() for r in receivers},
        "receiver_count": total,
        "last_allocated_batch_ms": tracker.last_allocated_ms,
        "pending_batches": tracker.pending_batches()[:MAX_LISTED],
        "rates": {s: reg.rates[s] for s in streams if s in reg.rates},
    }
    return reply
