"""An example Sluice source plugin: the lines of a text file, followed as it grows (``tail -f``).

Sluice loads this module through the ``sluice`` entry-point group and calls the pluggy hook
``sluice_register_sources()``; each factory it returns takes the ``[receiver.source_options]``
table and builds a :class:`sluice.receiver.Receiver`.  The receiver reads in a spawned task and
hands records over with ``store_many``, which waits on Sluice's rate limiter and block queue: the
file is read only as fast as the stream may ingest.

The read position survives a restart of the receiver (Sluice restarts a receiver whose task
raised), so a restart goes on where it stopped.  It does not survive a restart of the worker
process: a real source would keep its position at the source, as Kafka keeps committed offsets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sluice.hookspecs import hookimpl
from sluice.receiver import Receiver

__all__ = ["FileLinesReceiver", "sluice_register_sources"]


class FileLinesReceiver(Receiver):
    """Stores each line of ``path`` (without its newline) as one record, then waits for more.

    :param path: the text file to read; it must exist when the receiver starts.
    :param poll_ms: how long to wait at the end of the file before looking for appended lines.
    :param read_bytes: the most read at once; the lines of one read are stored together.
    """

    def __init__(self, path: str, poll_ms: float = 200.0, read_bytes: int = 1 << 16) -> None:
        super().__init__()
        if poll_ms <= 0:
            raise ValueError(f"file-lines option poll_ms must be above 0, got {poll_ms}")
        if read_bytes < 1:
            raise ValueError(f"file-lines option read_bytes must be at least 1, got {read_bytes}")
        self.path = Path(path)
        self.poll_ms = poll_ms
        self.read_bytes = read_bytes
        self.position = 0  # bytes of the file already stored

    async def on_start(self) -> None:
        if not self.path.is_file():
            raise FileNotFoundError(f"file-lines: {self.path} is not a file")
        self.spawn(self._follow(), name=f"file-lines-{self.receiver_id}")

    async def _follow(self) -> None:
        with self.path.open("rb") as fh:
            fh.seek(self.position)
            pending = b""
            while True:
                chunk = await asyncio.to_thread(fh.read, self.read_bytes)  # file I/O off the event loop
                if not chunk:
                    await asyncio.sleep(self.poll_ms / 1000)
                    continue
                data = pending + chunk
                cut = data.rfind(b"\n") + 1
                pending = data[cut:]
                if cut:
                    lines = data[:cut].decode("utf-8", "replace").splitlines()
                    await self.store_many(lines)
                    self.position += cut


def _factory(options: dict[str, Any]) -> FileLinesReceiver:
    known = {"path", "poll_ms", "read_bytes"}
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"file-lines does not know the option(s) {sorted(unknown)}; it takes {sorted(known)}")
    if "path" not in options:
        raise ValueError("file-lines needs the option path (the file to read)")
    return FileLinesReceiver(
        str(options["path"]), float(options.get("poll_ms", 200.0)), int(options.get("read_bytes", 1 << 16))
    )


@hookimpl
def sluice_register_sources() -> dict[str, Callable[[dict[str, Any]], FileLinesReceiver]]:
    """Sluice's plugin hook: the names this plugin adds to ``--source``."""
    return {"file-lines": _factory}
