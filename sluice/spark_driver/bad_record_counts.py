"""``driver.bad_records`` on the driver's side, for any source whose tasks decode Kafka records.

The tasks apply the policy (:class:`~sluice.storage.dead_letters.BadRecordHandling`); the driver
checks the setting once, gives each batch's tasks a Spark accumulator to count what they leave
out (tasks run in executors, whose own counters no one scrapes) and adds that count to
``sluice_bad_records_total`` when the batch completes.  The receiver source and direct mode both
stand on it, so the setting means the same whichever source reads the records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.errors import InvalidArgument
from sluice.kafka.bad_records import BadRecordPolicy
from sluice.spark_driver.metrics import BAD_RECORDS
from sluice.storage.block_store import store_root
from sluice.storage.dead_letters import BadRecordHandling


class BadRecordCounts:
    """The policy, its dead-letter store, and the accumulators of the batches still running.

    :param bad_records: ``fail``, ``skip`` or ``dead-letter``.
    :param dead_letter: ``driver.dead_letter``, the store URL (needed by ``dead-letter``).
    """

    def __init__(self, bad_records: str = "fail", dead_letter: str = "") -> None:
        self.policy = BadRecordPolicy(bad_records)
        if self.policy is BadRecordPolicy.DEAD_LETTER and not dead_letter:
            raise InvalidArgument(
                "driver.bad_records = dead-letter needs driver.dead_letter: the block store URL "
                "records that cannot be decoded are kept in"
            )
        self.dead_letter = store_root(dead_letter) if dead_letter else ""
        self._counts: dict[int, Any] = {}  # batch time -> the accumulator its tasks count bad records in

    def for_batch(
        self, spark: Any, batch_time_ms: int, store_options: Mapping[str, Any] | None = None
    ) -> BadRecordHandling | None:
        """What the batch's tasks do with records that cannot be decoded; None: fail (the default).
        ``store_options``: the dead-letter store's options as a task needs them."""
        if self.policy is BadRecordPolicy.FAIL:
            return None
        counter = self._counts[batch_time_ms] = spark.sparkContext.accumulator(0)
        return BadRecordHandling(self.policy, self.dead_letter, store_options or None, counter)

    def completed(self, batch_time_ms: int) -> None:
        """The batch completed: what its tasks left out joins ``sluice_bad_records_total``."""
        counter = self._counts.pop(batch_time_ms, None)
        if counter is not None and counter.value:
            BAD_RECORDS.labels(self.policy.value).inc(counter.value)
