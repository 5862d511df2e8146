"""Reading a file an operator names: a regular file of bounded size, or one line saying why not.

Token files, the ``--config`` TOML file and the metrics web configuration are small by nature, but
``open`` and ``read`` trust whatever the path leads to: ``/dev/zero`` reads until memory runs out, a
FIFO blocks the open until someone writes to it (a service hung at start with nothing in its log),
and a file of hundreds of megabytes is read whole before anything checks its content.  So each one
is opened with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer), the opened
file itself is ``fstat``-ed (not the path looked up a second time), anything but a regular file or
anything over the caller's limit is refused, and only then is it read.  Symbolic links are
followed: Kubernetes mounts secrets and config maps as links.

A refusal is a :class:`~sluice.config_key.ConfigError`, since each of these files is configuration:
the service stops at start with its usual configuration error status.
"""

from __future__ import annotations

import os
import stat

from sluice.config_key import ConfigError

MAX_CONFIG_BYTES = 1 << 20  # a configuration file (TOML, web configuration): 1 MiB

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def read_small_file(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    Raises ConfigError, one line starting ``{what} {path}``: the file does not exist, cannot be
    opened, is not a regular file (saying what it is) or holds more than ``limit`` bytes.
    """
    allowed = f"allowed: a regular file of at most {limit:,} bytes"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except OSError as exc:
        try:  # a socket cannot be opened at all (ENXIO): say what it is rather than the errno
            mode = os.stat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{what} {path} is {_kind(mode)}; {allowed}") from None
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    try:
        mode, size = (st := os.fstat(fd)).st_mode, st.st_size
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{what} {path} is {_kind(mode)}; {allowed}")
        if size > limit:
            raise ConfigError(f"{what} {path} holds {size:,} bytes; {allowed}")
        chunks, held = [], 0
        while held <= limit:  # to the end, or one byte past the limit for a file that grew since fstat
            try:
                chunk = os.read(fd, limit + 1 - held)
            except OSError as exc:
                raise ConfigError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
            if not chunk:
                break
            chunks.append(chunk)
            held += len(chunk)
    finally:
        os.close(fd)
    if held > limit:
        raise ConfigError(f"{what} {path} holds more than {limit:,} bytes; {allowed}")
    return b"".join(chunks)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")
