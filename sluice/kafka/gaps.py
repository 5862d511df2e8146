"""Offsets a fetch skips below the high watermark (a *gap*), and when a Kafka receiver takes one.  Pure.

Below its high watermark a Kafka partition's offsets run on without a gap, except where
compaction removed whole batches.  Spark does not take a gap silently: its DStream consumer
refuses non-consecutive offsets unless ``spark.streaming.kafka.allowNonConsecutiveOffsets`` is
set, and its Structured Streaming source reports "Cannot fetch records in [a, b)" as data loss,
fatal under ``failOnDataLoss``.

A broker may also show a batch before an earlier one can be read: tansu on S3 raises its high
watermark when it numbers a batch and writes the batch's object after, so a batch whose write
its store held up can be passed by the next one's (a fetch then starts past the position, and the
skipped batch turns up seconds later).  So a gap at the fetch position is fetched again for
``gap_wait_ms`` before it is taken; a gap further into a fetch is left to the next fetch, which
starts at it.  Taking a gap is the receiver's decision (logged and counted, or the receiver stops
under ``fail_on_data_loss``); this module only finds gaps and times the wait.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from sluice.kafka.record_batches import scan_batches

__all__ = ["Gap", "GapWait", "first_gap", "up_to"]


class Gap(NamedTuple):
    """Offsets ``[start, end)`` that the fetched batches skip."""

    start: int
    end: int


def first_gap(data: bytes | memoryview, position: int) -> Gap | None:
    """The first gap in a partition's fetched batches from ``position`` (the fetch offset) on."""
    expected = position
    for span in scan_batches(data):
        if span.next_offset <= position:
            continue  # a batch the broker sent whole although the fetch starts after it
        if span.base_offset > expected:
            return Gap(expected, span.base_offset)
        expected = span.next_offset
    return None


def up_to(data: bytes | memoryview, offset: int) -> bytes:
    """The fetched batches that end at or before ``offset``: a fetch stored up to its gap."""
    end = 0
    for span in scan_batches(data):
        if span.next_offset > offset:
            break
        end = span.end
    return bytes(data[:end])


class GapWait:
    """How long each partition has been waiting on the gap at its position.

    :param wait_s: how long a gap at the position is fetched again before it is taken (0: at once).
    """

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self._since: dict[Hashable, tuple[int, float]] = {}  # partition -> (gap start, first seen)

    def due(self, partition: Hashable, gap: Gap, now: float) -> bool:
        """Whether the gap ``partition`` meets at its position is to be taken now; its first sight starts the wait."""
        start, since = self._since.setdefault(partition, (gap.start, now))
        if start != gap.start:  # the position moved: a new gap, a new wait
            self._since[partition] = (gap.start, now)
            since = now
        if now - since >= self.wait_s:
            self._since.pop(partition, None)
            return True
        return False

    def through(self, partition: Hashable, data: bytes, position: int, now: float) -> tuple[bytes, Gap | None]:
        """What to store of ``partition``'s fetch from ``position``: all of it without a gap, up to
        a gap further in, nothing while a gap at the position is waited on; and that gap, the
        moment it is to be taken (then all of it is stored).  A fetch with nothing past the
        position (a response another partition filled) leaves a wait as it was: forgetting it
        there would start it again at every such fetch, and the gap would never be taken."""
        gap = first_gap(data, position)
        if gap is None and not any(span.next_offset > position for span in scan_batches(data)):
            return data, None  # nothing past the position: says nothing of a gap there, nor its end
        if gap is None or gap.start > position:
            self.forget(partition)
            return (data if gap is None else up_to(data, gap.start)), None
        return (data, gap) if self.due(partition, gap, now) else (b"", None)

    def forget(self, partition: Hashable) -> None:
        """No gap at ``partition``'s position (any more), or the partition is no longer owned."""
        self._since.pop(partition, None)

    def waiting(self) -> bool:
        """Whether some partition is waiting on a gap (its fetch is repeated after a backoff)."""
        return bool(self._since)
