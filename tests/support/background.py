"""Drive a LogManager's background loop (``LogManager.run``) in a unit test, on its own event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


def run_background(m: Any, until: Callable[[], bool], timeout: float = 5.0) -> None:
    """Run the manager's background loop until ``until()`` holds (or fail after ``timeout``)."""
    m.tick_seconds = 0.005

    async def main() -> None:
        task = asyncio.create_task(m.run())
        try:
            for _ in range(int(timeout / 0.005)):
                await asyncio.sleep(0.005)
                if until():
                    return
            raise AssertionError("the background loop did not get there")
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    asyncio.run(main())
