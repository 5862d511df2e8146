"""The errors of bytes that are not Kafka record batches, apart so the codecs can raise them.

:mod:`sluice.kafka.record_batches` parses batches and calls :mod:`sluice.kafka.codecs` to inflate
a compressed one; the codecs raise the same error on bytes they cannot inflate.  Kept here, below
both, neither module needs the other to define it.
"""

from __future__ import annotations

from sluice.errors import SluiceError


class BatchFormatError(SluiceError, ValueError):
    """Bytes that are not Kafka record batches; the message says where and what."""


class CodecUnavailable(BatchFormatError):
    """A compressed batch whose codec's package is not installed here: no record is at fault, so
    no bad-record policy applies (the message names the package)."""
