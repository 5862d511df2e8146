"""``LogLosses``: what a Kafka receiver does when the log does not hold what it fetches.

Three cases, each decided as Spark decides it, and each loud: bytes that are no record batches
stop the receiver for good (fetching again brings the same bytes; skipping them loses records); a
position out of the log's range (retention passed it, the topic was recreated) resets to
``auto_offset_reset`` or, under ``fail_on_data_loss``, stops it; offsets a fetch skips (a *gap*,
:mod:`~sluice.kafka.gaps`) are fetched again for ``gap_wait_ms``, then counted
and logged, or stop it under ``fail_on_data_loss``.
"""

from __future__ import annotations

import logging
import time

from aiokafka import TopicPartition

from sluice.kafka.gaps import GapWait
from sluice.kafka.offsets import DataLossError
from sluice.kafka.record_batches import BatchFormatError
from sluice.receiver.receiver import Receiver

log = logging.getLogger(__name__)


class LogLosses:
    """The data-loss decisions of one Kafka receiver.

    :param receiver: the receiver they stop and report on.
    :param fail_on_data_loss: Spark's ``failOnDataLoss``.
    :param gap_wait_ms: how long a gap at the position is fetched again before it is taken.
    """

    def __init__(self, receiver: Receiver, fail_on_data_loss: bool, gap_wait_ms: int) -> None:
        self.receiver = receiver
        self.fail_on_data_loss = fail_on_data_loss
        self.gaps = GapWait(gap_wait_ms / 1000)

    def through_gap(self, tp: TopicPartition, data: bytes, position: int) -> bytes:
        """The fetched bytes to store (:meth:`GapWait.through`), once a gap at the position is taken:
        counted, then logged, or the receiver stops."""
        data, gap = self.gaps.through(tp, data, position, time.monotonic())
        if gap is not None:
            self.receiver.supervisor.metrics.error("offset_gap")
            lost = f"{tp.topic}/{tp.partition}: offsets [{gap.start}, {gap.end}) are not in the log"
            if self.fail_on_data_loss:
                self._stop(lost)
                return b""
            log.warning(
                "receiver %s: skipping missing records: %s (compaction, or a broker lost them)",
                self.receiver.receiver_id,
                lost,
            )
        return data

    def out_of_range(self, tp: TopicPartition, position: int, reset_to: str) -> bool:
        """A position the log no longer (or not yet) holds: whether to reset to ``reset_to``
        (``earliest`` or ``latest``), logged; else the receiver stops."""
        if self.fail_on_data_loss:
            self._stop(
                f"{tp.topic}/{tp.partition}: offset {position} is no longer in the log (retention, a recreated topic?)"
            )
            return False
        log.warning(
            "receiver %s: offset %d of %s/%d is out of the log's range; resetting to the %s offset",
            self.receiver.receiver_id,
            position,
            tp.topic,
            tp.partition,
            reset_to,
        )
        return True

    def unreadable(self, tp: TopicPartition, position: int, error: BatchFormatError) -> None:
        """Stop for good on bytes that are not record batches."""
        log.error(
            "receiver %s stops: the record batches of %s/%d fetched at offset %d cannot be read (%s); "
            "nothing from there on is stored or committed",
            self.receiver.receiver_id,
            tp.topic,
            tp.partition,
            position,
            error,
        )
        self.receiver.supervisor.metrics.error("unreadable_batch")
        self.receiver.stop(f"unreadable record batches in {tp.topic}/{tp.partition} at offset {position}", error)

    def _stop(self, lost: str) -> None:
        """Stop the receiver for records the log does not hold; the tracker's status names them."""
        message = f"receiver {self.receiver.receiver_id}: data lost: {lost}"
        self.receiver.report_error(message, DataLossError(lost))
        self.receiver.stop(message, DataLossError(lost))
