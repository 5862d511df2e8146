"""Inflating a compressed Kafka record batch's records under a cap, for every codec Kafka has.

aiokafka inflates a batch whole before it parses a record, so a few KiB of forged or hostile
compressed records could take gigabytes of a Spark task or of the receiver.  Each codec here
inflates a piece at a time (gzip, lz4 and zstd as streams, snappy block by block after reading
each block's declared size) and stops with :class:`~sluice.kafka.batch_errors.BatchFormatError`
as soon as the output would pass the cap.  A codec whose package is missing is a
``BatchFormatError`` naming the package, as a batch that cannot be read (the receiver stops on it
instead of restarting into it again).
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from types import ModuleType

from sluice.kafka.batch_errors import BatchFormatError, CodecUnavailable

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4  # a v2 batch's attributes & 0x07
CHUNK = 1 << 20  # bytes inflated at a time
_XERIAL_HEADER = b"\x82SNAPPY\x00"  # the framing of the Java clients: 16 bytes, then length-prefixed blocks
_XERIAL_BYTES = 16


def inflate(codec: int, data: memoryview, base_offset: int, limit: int) -> bytes:
    """The records of a batch compressed with ``codec``, at most ``limit`` bytes of them."""
    if codec not in _INFLATERS:
        raise BatchFormatError(
            f"record batch at offset {base_offset} has compression codec {codec}: Kafka knows 0 to 4"
        )
    name, inflater = _INFLATERS[codec]
    out = _Output(base_offset, limit)
    try:
        inflater(data, out)
    except BatchFormatError:
        raise
    except Exception as exc:  # each library has its own errors for bytes it cannot inflate
        raise BatchFormatError(f"record batch at offset {base_offset}: undecodable {name} data ({exc})") from exc
    return b"".join(out.parts)


class _Output:
    """The inflated pieces and what is left of the cap."""

    def __init__(self, base_offset: int, limit: int) -> None:
        self.base_offset, self.left, self.limit = base_offset, limit, limit
        self.parts: list[bytes] = []

    def room(self) -> int:
        """The most to inflate next: a piece, or one byte past the cap (which refuses it)."""
        return min(CHUNK, self.left + 1)

    def add(self, piece: bytes) -> None:
        self.left -= len(piece)
        if self.left < 0:
            self.refuse()
        self.parts.append(piece)

    def refuse(self) -> None:
        raise BatchFormatError(f"record batch at offset {self.base_offset} inflates past {self.limit} bytes: refused")

    def truncated(self, codec: str) -> None:
        raise BatchFormatError(f"record batch at offset {self.base_offset}: its {codec} data is truncated")


def _library(module: str, package: str, codec: str, out: _Output) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise CodecUnavailable(
            f"record batch at offset {out.base_offset} is {codec}-compressed and the {package} package is "
            f"not installed: pip install {package} (on the receivers and every Spark executor)"
        ) from None


def _gzip(data: memoryview, out: _Output) -> None:
    """Gzip members one after the other."""
    rest = bytes(data)
    while rest:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while not inflater.eof and rest:
            out.add(inflater.decompress(rest, out.room()))
            rest = inflater.unconsumed_tail
        if not inflater.eof:
            out.truncated("gzip")
        rest = inflater.unused_data


def _lz4(data: memoryview, out: _Output) -> None:
    """LZ4 frames one after the other (Kafka's v2 batches use the standard frame format)."""
    frame = _library("lz4.frame", "lz4", "lz4", out)
    rest = bytes(data)
    while rest:
        inflater = frame.LZ4FrameDecompressor()
        out.add(inflater.decompress(rest, max_length=out.room()))
        while not inflater.eof and not inflater.needs_input:
            out.add(inflater.decompress(b"", max_length=out.room()))
        if not inflater.eof:
            out.truncated("lz4")
        rest = inflater.unused_data


def _zstd(data: memoryview, out: _Output) -> None:
    """Zstandard frames as a stream; no window larger than the cap (a frame may ask for one)."""
    zstandard = _library("zstandard", "zstandard", "zstd", out)
    window = 1 << max(10, (out.limit - 1).bit_length())
    decompressor = zstandard.ZstdDecompressor(max_window_size=window)
    with decompressor.stream_reader(bytes(data), read_across_frames=True) as reader:
        while piece := reader.read(out.room()):
            out.add(piece)


def _snappy(data: memoryview, out: _Output) -> None:
    """The Java clients' xerial framing (length-prefixed raw blocks) or one raw block; each block's
    declared size is checked against the cap before it is inflated."""
    cramjam = _library("cramjam", "cramjam", "snappy", out)
    if len(data) > _XERIAL_BYTES and bytes(data[: len(_XERIAL_HEADER)]) == _XERIAL_HEADER:
        pos = _XERIAL_BYTES
        while pos < len(data):
            if pos + 4 > len(data):
                out.truncated("snappy")
            size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
            if size < 0 or pos + 4 + size > len(data):
                out.truncated("snappy")
            _snappy_block(cramjam, data[pos + 4 : pos + 4 + size], out)
            pos += 4 + size
    else:
        _snappy_block(cramjam, data, out)


def _snappy_block(cramjam: ModuleType, block: memoryview, out: _Output) -> None:
    """One raw snappy block: its uncompressed size (a varint first) within the cap, then inflated."""
    size = shift = 0
    for byte in block[:5]:
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    else:
        raise BatchFormatError(f"record batch at offset {out.base_offset}: a snappy block without its size")
    if size > out.left:
        out.refuse()
    out.add(bytes(cramjam.snappy.decompress_raw(bytes(block))))


_INFLATERS: dict[int, tuple[str, Callable[[memoryview, _Output], None]]] = {
    GZIP: ("gzip", _gzip),
    SNAPPY: ("snappy", _snappy),
    LZ4: ("lz4", _lz4),
    ZSTD: ("zstd", _zstd),
}
