"""The tracker's framing: a 4-byte big-endian length, then one msgpack map of that many bytes.

Split from the message table (:mod:`sluice.tracker.wire.protocol`) because the server, the client and
the log's records all frame with it while only the connection code needs the table.  The frame
length is bounded before any byte of the payload is buffered, and msgpack's own unpack limits
bound every string, binary, array and map (:class:`Limits`).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import msgpack

from sluice.errors import InvalidArgument, SluiceError

DEFAULT_MAX_FRAME = 1 << 20
HEADER = struct.Struct(">I")


@dataclass(frozen=True)
class Limits:
    """Bounds on what one peer can make us allocate; the server uses the defaults.

    ``max_frame`` bounds the payload before it is read; the msgpack limits bound the decoded
    objects inside it (a 1 MiB frame of 1-byte array headers would otherwise become millions of
    Python objects).  Clients use :data:`CLIENT_LIMITS`: the tracker is trusted more, and its
    replies (an allocation of 10,000 blocks) are larger than any request.
    """

    max_frame: int = DEFAULT_MAX_FRAME
    max_array_len: int = 65_536
    max_map_len: int = 4_096
    strict_map_key: bool = True

    def unpacker(self) -> msgpack.Unpacker:
        return msgpack.Unpacker(
            max_buffer_size=self.max_frame,
            max_str_len=self.max_frame,
            max_bin_len=self.max_frame,
            max_array_len=self.max_array_len,
            max_map_len=self.max_map_len,
            max_ext_len=0,
            strict_map_key=self.strict_map_key,
            raw=False,
        )


DEFAULT_LIMITS = Limits()
CLIENT_LIMITS = Limits(max_frame=256 << 20, max_array_len=10_000_000, max_map_len=10_000_000, strict_map_key=False)


class FrameTooLarge(SluiceError):
    """A length prefix over the limit: the stream cannot be resynchronised, close it."""


@dataclass(frozen=True)
class BadFrame:
    """A frame whose framing was intact but whose payload was not a usable map."""

    reason: str  # metric label: undecodable | not_a_map
    detail: str


_local = threading.local()


def pack(obj: object) -> bytes:
    """msgpack bytes of ``obj`` with this thread's reused Packer (``packb`` builds one per call)."""
    try:
        packer = _local.packer
    except AttributeError:
        packer = _local.packer = msgpack.Packer(use_bin_type=True)
    return packer.pack(obj)


def encode(message: Mapping[str, object]) -> bytes:
    """One frame: length prefix + msgpack map."""
    payload = pack(message)
    return HEADER.pack(len(payload)) + payload


class FrameDecoder:
    """Incremental frame splitter + bounded msgpack decoder for one connection.

    ``feed`` returns decoded maps and :class:`BadFrame` markers in arrival order; it raises
    :class:`FrameTooLarge` as soon as a length prefix exceeds the limit, before buffering it.
    """

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._buf = bytearray()
        self._unpacker = limits.unpacker()
        self._consumed = 0

    @property
    def buffered(self) -> int:
        """Bytes of a frame begun and not complete."""
        return len(self._buf)

    def set_limits(self, limits: Limits) -> None:
        """Switch limits between frames (the server's larger ones once hello is accepted)."""
        self.limits = limits
        self._unpacker = limits.unpacker()
        self._consumed = 0

    def feed(self, data: bytes) -> list[dict | BadFrame]:
        buf = self._buf
        buf += data
        out: list[dict | BadFrame] = []
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            (length,) = HEADER.unpack_from(buf, pos)
            if length > self.limits.max_frame:
                raise FrameTooLarge(f"frame of {length} bytes is over the limit of {self.limits.max_frame}")
            if n - pos - 4 < length:
                break
            # the unpacker copies the payload once, straight from the buffer (both views released
            # before the buffer is trimmed)
            with memoryview(buf) as view, view[pos + 4 : pos + 4 + length] as payload:
                out.append(self._decode(payload))
            pos += 4 + length
        if pos:
            del buf[:pos]
        return out

    def _decode(self, payload: memoryview) -> dict | BadFrame:
        try:
            self._unpacker.feed(payload)
            obj = self._unpacker.unpack()
            self._consumed += len(payload)
            if self._unpacker.tell() != self._consumed:
                raise InvalidArgument("trailing bytes after the msgpack object")
        except Exception as exc:  # noqa: BLE001 - msgpack raises many kinds; every one means "bad payload"
            self._unpacker = self.limits.unpacker()
            self._consumed = 0
            return BadFrame("undecodable", f"{type(exc).__name__}: {exc}"[:200])
        if not isinstance(obj, dict):
            return BadFrame("not_a_map", f"frame holds {type(obj).__name__}, expected a map")
        return obj


# --- message types ----------------------------------------------------------------------------
