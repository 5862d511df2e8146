"""Sluice's exceptions: one root, :class:`SluiceError`, and the list of what derives from it.

``except SluiceError`` catches every error Sluice raises on purpose, and nothing else.  Each
subclass also keeps the builtin base it always had, as httpx and aiokafka do: a bad configuration
value is still a ``ValueError`` and an unreachable tracker still a ``ConnectionError``, so code that
catches builtins keeps working.  A bad argument to a function or constructor (a negative rate, a
callable that is not one) raises :class:`InvalidArgument` or :class:`InvalidArgumentType`, still a
``ValueError`` or ``TypeError``; a call the object's state does not allow raises
:class:`InvalidState`, still a ``RuntimeError``.  A test keeps library code from raising a bare
builtin exception.

``retriable`` says whether the same operation, tried again later unchanged, may succeed: ``True``
for a peer that did not answer in time or went away (connection, unavailable, timeout); ``False``
for protocol, configuration, misuse and corrupt-data errors, where only a change helps.  A
tracker's ``error`` reply (:class:`~sluice.tracker.wire.protocol.RemoteError`) decides per reply code.

Each class lives in the module that raises it (several carry that module's logic, and a subclass
is imported from where it is used); the table below is the one list of them, kept complete by a
test that walks the package.  ``errors`` imports nothing, so any module can derive from the root.

===================  ======================================  ===============  =========  ===============================
class                module                                  builtin base     retriable  raised when
===================  ======================================  ===============  =========  ===============================
InvalidArgument      sluice.errors                           ValueError       False      a value given to a function or
                                                                                         constructor is not allowed
InvalidArgumentType  sluice.errors                           TypeError        False      an argument is of the wrong
                                                                                         type
InvalidState         sluice.errors                           RuntimeError     False      a call that the object's state
                                                                                         does not allow (started twice,
                                                                                         used after a stop)
ConfigError          sluice.config_key                       ValueError       False      a configuration value is not
                                                                                         allowed
InvalidMessage       sluice.block_info                       ValueError       False      a wire map does not describe a
                                                                                         valid value
PluginError          sluice.plugins                          Exception        False      a plugin or what it built is
                                                                                         broken
UnknownNameError     sluice.plugins                          ValueError       False      no plugin registers a name
DuplicateNameError   sluice.plugins                          Exception        False      two plugins register one name
FormatError          sluice.storage.format_errors            ValueError       False      bytes are not a valid block
CorruptFormatError   sluice.storage.format_errors            ValueError       False      a block's bytes are damaged
BatchFormatError     sluice.kafka.record_batches             ValueError       False      bytes are not Kafka record
                                                                                         batches
CodecUnavailable     sluice.kafka.record_batches             ValueError       False      a batch's codec package is
                                                                                         not installed
RecordFormatError    sluice.kafka.batch_decode               ValueError       False      a record of a sound batch
                                                                                         does not parse (internal)
BadRecordError       sluice.kafka.bad_records                ValueError       False      a Kafka record cannot be
                                                                                         decoded (bad_records = fail)
BlockStoreError      sluice.storage.block_store              Exception        False      a block cannot be written, read
                                                                                         or deleted (after the store's
                                                                                         own retries), or a bad URL
BlockMissingError    sluice.storage.block_store              Exception        False      no block at the location
LocationRefused      sluice.storage.block_store              Exception        False      a location outside the store or
                                                                                         of the wrong shape
BlockCorruptError    sluice.storage.block_store              Exception        False      the bytes at a location are not
                                                                                         the block
ProcessError         sluice.testing.processes                RuntimeError     False      a test child did not start,
                                                                                         listen, or stay alive
BlockGeneratorError  sluice.receiver.block_generator         RuntimeError     False      a block generator is misused
ReceiverNotStarted   sluice.receiver.receiver                RuntimeError     False      a receiver is used before a
                                                                                         supervisor adopts it
SourceClosed         sluice.receiver.sources.socket          ConnectionError  True       the socket source's server
                                                                                         closed the connection
TrackerUnavailable   sluice.tracker.client.connection        ConnectionError  True       the tracker did not answer in
                                                                                         time, or the client is closed
ConnectionLost       sluice.tracker.client.connection        ConnectionError  True       the connection to the tracker
                                                                                         dropped under a request
TrackerAuthError     sluice.tracker.client.connection        PermissionError  False      the tracker refused the hello
                                                                                         (token or protocol version)
FrameTooLarge        sluice.tracker.wire.framing             Exception        False      a frame's length prefix is over
                                                                                         the limit
Busy                 sluice.tracker.server.limits            ValueError       False      a stream's queue is at its
                                                                                         bound (reply ``busy``: retry)
Forbidden            sluice.tracker.server.limits            ValueError       False      the credential does not allow
                                                                                         the request
LimitReached         sluice.tracker.server.limits            ValueError       False      a ``tracker.max_*`` bound
                                                                                         refuses the request
UnknownOp            sluice.tracker.wire.protocol            ValueError       False      a request names an op the
                                                                                         tracker does not serve
RemoteError          sluice.tracker.wire.protocol            Exception        per code   the tracker replied ``error``
                                                                                         (retriable: ``unavailable``)
NotRegistered        sluice.tracker.server.service           ValueError       False      a request is about a stream no
                                                                                         registered receiver feeds
LogWriteFailed       sluice.tracker.log.events               RuntimeError     True       an event could not be logged;
                                                                                         nothing changed
WALFailed            sluice.tracker.log.group_commit         RuntimeError     False      the write-ahead log failed; the
                                                                                         tracker must stop
LogClosed            sluice.tracker.log.wal                  OSError          False      a write after the log was
                                                                                         closed
WALCorruption        sluice.tracker.log.wal                  RuntimeError     False      a damaged log record that is
                                                                                         not a torn tail
RecordTooLarge       sluice.tracker.log.wal                  ValueError       False      a log record would be over
                                                                                         the 1 GiB a record may hold
PreconditionFailed   sluice.tracker.log.store                OSError          False      a conditional write to the
                                                                                         log's store lost
LogStoreError        sluice.tracker.log.store                ValueError       False      a wal_dir URL no log can be
                                                                                         kept in
Deposed              sluice.tracker.log.protocol             OSError          False      another tracker took the log:
                                                                                         this one no longer leads
OutputError          sluice.spark_driver.sinks               OSError          False      a batch's output could not be
                                                                                         renamed into place
UnknownPartitions    sluice.kafka.offsets                    KeyError         False      limits asked for partitions
                                                                                         with no current offset
SourceError          sluice.spark_driver.source              RuntimeError     False      a source cannot do what the
                                                                                         driver asked
BatchFailedError     sluice.spark_driver.job_scheduler       RuntimeError     False      a batch failed after all its
                                                                                         retries
CheckpointError      sluice.spark_driver.direct.checkpoint   RuntimeError     False      a checkpoint cannot be read or
                                                                                         is another stream's
KafkaOffsetsError    sluice.kafka.offsets_client             RuntimeError     True       the brokers did not answer a
                                                                                         direct-mode request
RangeReadError       sluice.spark_driver.direct.reader       RuntimeError     True       an offset range read failed or
                                                                                         stalled (a task retry reads it
                                                                                         again)
DataLossError        sluice.kafka.offsets                    RuntimeError     False      offsets to read are gone from
                                                                                         the log
OptionError          sluice.spark_driver.structured.options  ValueError       False      a Structured Streaming option
                                                                                         is missing or not allowed
OffsetError          sluice.spark_driver.structured.source   RuntimeError     False      an offset the tracker cannot
                                                                                         serve as it stands
UIServeError         sluice.spark_driver.ui.server           OSError          False      the streaming page cannot
                                                                                         listen on its host and port
NotFound             sluice.spark_driver.ui.server           LookupError      False      the streaming API has no such
                                                                                         path or batch (HTTP 404)
BadRequest           sluice.spark_driver.ui.server           ValueError       False      a streaming API parameter is
                                                                                         not allowed (HTTP 400)
DemoError            sluice.demo.processes                   Exception        False      a demo precondition or start-up
                                                                                         failed
ProfileError         sluice.demo.profile                     ValueError       False      a demo profile cannot be parsed
===================  ======================================  ===============  =========  ===============================
"""

from __future__ import annotations

__all__ = ["InvalidArgument", "InvalidArgumentType", "InvalidState", "SluiceError"]


class SluiceError(Exception):
    """The root of every error Sluice raises on purpose.

    :cvar retriable: the same operation, tried again later unchanged, may succeed.
    """

    retriable: bool = False


class InvalidArgument(SluiceError, ValueError):
    """A value given to a function or constructor is not allowed; the message names what is."""


class InvalidArgumentType(SluiceError, TypeError):
    """An argument is of the wrong type; the message names the type expected."""


class InvalidState(SluiceError, RuntimeError):
    """A call the object's state does not allow (started twice, used after a stop)."""
