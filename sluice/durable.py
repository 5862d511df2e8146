"""Durable file writes: the one way Sluice replaces a file so that a crash leaves old or new, whole.

Write to a temporary name in the same directory, fsync it, rename it over the target, then fsync
the directory so the rename itself survives a power loss.  The tracker's WAL snapshots, the
receivers' blocks and the direct driver's checkpoint all write through it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from pathlib import Path

try:
    _IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))
except (ValueError, OSError):  # the name is unknown or the limit undetermined
    _IOV_MAX = 1024


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the directory entries of ``path`` (creations, renames, deletions) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], parts: bytes | Iterable[bytes], *, fsync: bool = True) -> None:
    """Replace ``path`` with ``parts`` (bytes, or buffers written in one ``writev``) atomically.

    One ``writev`` for the whole file in the common case: a writer thread hands the GIL to the
    event loop at each system call, so fewer calls are faster.  The file is created readable by
    all (as ``open`` would, minus the umask): blocks are read by Spark executors, maybe as another
    user.  ``fsync=False`` keeps the atomic rename but skips both fsyncs (tests and benchmarks only).
    """
    target = Path(path)
    buffers = [parts] if isinstance(parts, (bytes, bytearray, memoryview)) else list(parts)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            for start in range(0, len(buffers), _IOV_MAX):  # writev takes at most IOV_MAX buffers
                group = buffers[start : start + _IOV_MAX]
                total, written = sum(map(len, group)), os.writev(fd, group)
                if written != total:  # a short write: finish with plain writes
                    data = b"".join(group)[written:]
                    while data:
                        data = data[os.write(fd, data) :]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        fsync_dir(target.parent)
