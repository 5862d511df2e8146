"""Durable file writes: the one way Sluice replaces a file so that a crash leaves old or new, whole.

Write to a temporary name in the same directory, fsync it, rename it over the target, then fsync
the directory so the rename itself survives a power loss.  The tracker's WAL snapshots, the
receivers' blocks and the direct driver's checkpoint all rely on it (receivers and the driver
import the tracker package already, so this is the lowest common place).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the directory entries of ``path`` (creations, renames, deletions) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], parts: bytes | Iterable[bytes], *, fsync: bool = True) -> None:
    """Replace ``path`` with ``parts`` (bytes, or buffers written in one ``writev``) atomically.

    ``fsync=False`` keeps the atomic rename but skips both fsyncs (tests and benchmarks only).
    """
    target = Path(path)
    buffers = [parts] if isinstance(parts, (bytes, bytearray, memoryview)) else list(parts)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        try:
            total, written = sum(len(b) for b in buffers), os.writev(fd, buffers)
            if written != total:  # a short write: finish with plain writes
                data = b"".join(buffers)[written:]
                while data:
                    data = data[os.write(fd, data):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if fsync:
        fsync_dir(target.parent)
