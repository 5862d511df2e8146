"""Requests in flight on one connection: ids, futures, deadlines and the answers matched to them.

One sweeper task expires requests past their deadline, which at thousands of requests a second costs
less than a timer per request.
"""

from __future__ import annotations

import asyncio
import itertools

from sluice.tracker.wire.protocol import RemoteError


class PendingRequests:
    """Futures of the requests sent and not yet answered, by request id."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._futures: dict[int, asyncio.Future] = {}
        self._deadlines: dict[int, float] = {}  # request id -> loop time it expires

    def add(self, timeout: float) -> tuple[int, asyncio.Future]:
        """A new request id and the future its answer resolves; it fails with ``TimeoutError`` after ``timeout`` s."""
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._futures[rid] = future
        self._deadlines[rid] = loop.time() + timeout
        return rid, future

    def discard(self, rid: int) -> None:
        self._futures.pop(rid, None)
        self._deadlines.pop(rid, None)

    def answer(self, rid: int, msg: dict) -> None:
        """Resolve request ``rid`` with the tracker's answer ``msg`` (``ok`` or ``error``); a late or
        unknown answer is dropped."""
        future = self._futures.pop(rid, None)
        self._deadlines.pop(rid, None)
        if future is None or future.done():
            return
        if "error" in msg:
            err = msg["error"] if isinstance(msg["error"], dict) else {}
            future.set_exception(RemoteError(str(err.get("code", "?")), str(err.get("message", "")), extra=err))
        else:
            future.set_result(msg.get("ok"))

    def fail_all(self, exc: BaseException) -> None:
        self._deadlines.clear()
        futures, self._futures = self._futures, {}
        for future in futures.values():
            if not future.done():
                future.set_exception(exc)

    async def expire(self, period: float) -> None:
        """Every ``period`` s, fail the requests past their deadline with ``TimeoutError`` (runs until cancelled)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for rid in [rid for rid, deadline in self._deadlines.items() if deadline <= now]:
                self._deadlines.pop(rid, None)
                future = self._futures.pop(rid, None)
                if future is not None and not future.done():
                    future.set_exception(TimeoutError())
