"""The tests' one way to wait for what no event announces: poll it, with a deadline.

Synchronous code waits with :func:`sluice.embedded.wait_until` (which also fails at once when a
watched process exits); a coroutine awaits :func:`eventually`, which lets the loop run between
polls.  Neither orders a test's own tasks: those wait on events or a manual clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sluice.embedded import wait_until

__all__ = ["eventually", "wait_until"]


async def eventually(
    predicate: Callable[[], Any] | Callable[[], Awaitable[Any]],
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` (plain or async) until it is truthy and return that value; fail with
    ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} not reached within {timeout}s")
        await asyncio.sleep(interval)
