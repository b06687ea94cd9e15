"""Drive a LogManager's background loop (``LogManager.run``) in a unit test, on its own event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any


@contextlib.asynccontextmanager
async def running(m: Any, tick_seconds: float = 0.005) -> AsyncIterator[None]:
    """The manager's background loop runs (a tick every `tick_seconds`) inside the block and is
    cancelled at its end."""
    m.tick_seconds = tick_seconds
    task = asyncio.create_task(m.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wait_until(until: Callable[[], bool], timeout: float = 5.0, step: float = 0.005) -> bool:
    """Whether ``until()`` came to hold within `timeout` seconds (polled every `step`)."""
    for _ in range(int(timeout / step)):
        await asyncio.sleep(step)
        if until():
            return True
    return False


def run_background(m: Any, until: Callable[[], bool], timeout: float = 5.0) -> None:
    """Run the manager's background loop until ``until()`` holds (or fail after ``timeout``)."""

    async def main() -> None:
        async with running(m):
            if not await wait_until(until, timeout):
                raise AssertionError("the background loop did not get there")

    asyncio.run(main())
