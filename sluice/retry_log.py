"""``RetryLog``: what a service says while it retries a peer it cannot reach.

An operator must see a wait at once (a service silent at INFO looks hung) without a log that grows
by a traceback per attempt.  So: one WARNING line on the first failure, with the address, the
reason and the retry interval; then at most one line per ``every_s`` with the failures since; and
one line on recovery with how long it took.  An expected outage is never a traceback.

The class only decides what to say and when (it returns the line, or ``None``), on a clock it is
given, so the rate limit is tested on a manual clock; the caller logs the line.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable

__all__ = ["RetryLog", "reason"]


def reason(error: BaseException) -> str:
    """A short, lower-case cause of a failed attempt: ``connection refused``, ``timed out``..."""
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, OSError) and isinstance(error.errno, int) and error.errno in errno.errorcode:
        return os.strerror(error.errno).lower()
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class RetryLog:
    """The lines of one retry loop towards one peer.

    :param peer: what is reached, as the lines name it: ``the tracker at 127.0.0.1:7100``.
    :param retry_every_s: the longest wait between two attempts (said in the first line).
    :param every_s: at most one "still cannot reach" line this often.
    :param clock: seconds, monotonic (``time.monotonic``; a manual clock in tests).
    """

    def __init__(
        self,
        peer: str,
        retry_every_s: float,
        *,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.peer = peer
        self.retry_every_s = retry_every_s
        self.every_s = every_s
        self.clock = clock
        self._since: float | None = None  # when the first failure of the current outage happened
        self._attempts = 0  # failed attempts of the current outage
        self._said_at = 0.0
        self._unsaid = 0  # failures since the last line

    @property
    def failing(self) -> bool:
        return self._since is not None

    def failed(self, why: str) -> str | None:
        """An attempt failed because of ``why``: the WARNING line to log now, or ``None``."""
        now = self.clock()
        self._attempts += 1
        self._unsaid += 1
        if self._since is None:
            self._since, self._said_at, self._unsaid = now, now, 0
            return f"cannot reach {self.peer} ({why}); retrying every {self.retry_every_s:.1f} s at most"
        if now - self._said_at < self.every_s:
            return None
        line = (
            f"still cannot reach {self.peer} ({why}) after {now - self._since:.0f} s: "
            f"{self._unsaid} failed attempt(s) in the last {now - self._said_at:.0f} s, "
            f"{self._attempts} in all; retrying"
        )
        self._said_at, self._unsaid = now, 0
        return line

    def reached(self) -> str | None:
        """An attempt succeeded: the recovery line when attempts had failed, else ``None``."""
        if self._since is None:
            return None
        line = f"reached {self.peer} after {self.clock() - self._since:.1f} s, {self._attempts + 1} attempts"
        self._since, self._attempts, self._unsaid = None, 0, 0
        return line
