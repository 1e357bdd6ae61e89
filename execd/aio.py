"""Waiting and cancelling in asyncio without losing a cancellation.

Python 3.11's asyncio.wait_for() returns the awaited result when a cancellation arrives
just as that awaitable completes: the cancellation is lost (python/cpython#86296, fixed
in 3.12, where wait_for is built on asyncio.timeout). A daemon loop waiting for its wake
event with wait_for, cancelled at shutdown in the same turn as something woke it, would
go round again and hold the shutdown open. asyncio.timeout() tells its own cancellation
from the caller's, so these helpers wait with it; and a shutdown cancels until every
task is done, for code that may still lose one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """True once `event` is set, False when `timeout` seconds pass first. A cancellation
    of the caller always propagates, even one that arrives as the event is set."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(max(0.0, timeout)):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def cancel_until_done(tasks: Iterable[asyncio.Task[Any]], *, every: float = 1.0) -> None:
    """Cancel `tasks` and wait until each is done, cancelling again every `every` seconds
    any that lost a cancellation and went on."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=every)
