"""How many records one micro-batch may take: Spark's ``ReadLimit`` meets Sluice's rates.  Pure.

Spark asks a source for ``latestOffset(start, limit)``.  ``limit`` is what the source's
``getDefaultReadLimit`` said (Spark passes ``ReadAllAvailable`` instead where the trigger wants
everything, ``Trigger.Once``).  A Sluice source bounds a batch by the smaller of
``maxOffsetsPerTrigger`` and, with admission on, the published rate for one trigger interval plus
the receiver mode's headroom (:func:`~sluice.spark_driver.receiver_source.batch_bound`), and by
what the last batch showed fits one interval when it overran its trigger
(:mod:`~sluice.spark_driver.structured.batch_timer`).  So that
Spark passes a limit at all when only admission bounds batches, the default limit is then the
largest ``ReadMaxRows``: the real bound is computed each batch from the rate in force.
"""

from __future__ import annotations

from sluice.spark_driver.receiver_source import batch_bound
from sluice.spark_driver.structured.options import Admission

#: ``ReadMaxRows`` of "no fixed bound": a JVM long, which Spark's side parses.
NO_FIXED_BOUND = 2**63 - 1


def default_max_rows(settings: Admission) -> int | None:
    """``getDefaultReadLimit``'s ``ReadMaxRows``; ``None`` for ``ReadAllAvailable``."""
    if settings.max_offsets_per_trigger is not None:
        return settings.max_offsets_per_trigger
    return NO_FIXED_BOUND if settings.admission else None


def batch_records(
    settings: Admission, max_rows: int | None, rate: float | None, streams: int = 1, overrun: int | None = None
) -> int | None:
    """The most records one stream's part of the next batch takes, ``None`` for all.

    :param max_rows: the ``ReadMaxRows`` Spark passed; ``None`` for ``ReadAllAvailable``, which
        wins over every bound (the engine's trigger wants everything).
    :param rate: the stream's rate in force (records/s); ``None`` or not positive: none.
    :param streams: how many streams share the fixed bounds (each gets an equal part, at least 1).
    :param overrun: with admission on, what the last batch showed fits one interval when it overran
        (:meth:`~sluice.spark_driver.structured.batch_timer.BatchTimer.overrun_bound`), shared too.
    """
    if max_rows is None:
        return None
    fixed = [] if max_rows >= NO_FIXED_BOUND else [max_rows]
    if settings.max_offsets_per_trigger is not None:
        fixed.append(settings.max_offsets_per_trigger)
    if settings.admission and overrun is not None:
        fixed.append(overrun)
    bounds = [max(1, b // max(streams, 1)) for b in fixed]
    if settings.admission and rate is not None and rate > 0:
        bounds.append(batch_bound(rate, settings.trigger_interval_ms))
    return min(bounds) if bounds else None
