"""The tracker service (``sluice-tracker``): Spark's ``ReceivedBlockTracker`` and ``ReceiverTracker``.

Pure state machines (:mod:`.received_block_tracker`, :mod:`.registry`, :mod:`.stream_queue`) and
the operations over them (:mod:`.service`), behind one asyncio shell (:mod:`.server`,
:mod:`.connection`); who a peer is (:mod:`.auth`, :mod:`.hello`); the standby's following of a
shared log (:mod:`.standby`).  It writes through :mod:`sluice.tracker.log`.
"""
