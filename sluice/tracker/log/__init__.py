"""The tracker's durable log: the local write-ahead log and the log on an object store.

:mod:`.events` are the logged state changes (Spark's ``ReceivedBlockTrackerLogEvent``);
:mod:`.wal` keeps them in CRC-checked segment files, :mod:`.group_commit` shares fsyncs;
:mod:`.object_log` keeps them on S3 or a shared directory (:mod:`.store`, :mod:`.protocol`) under
the leader's :mod:`.lease`.
"""
