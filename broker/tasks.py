"""Small asyncio helpers shared by the broker's background tasks."""
from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel `task` and wait until it has ended, whatever it ended with (it is being shut
    down: its own errors were logged where they happened)."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass
