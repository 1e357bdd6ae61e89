"""The daemon's loops end when the shutdown's cancel arrives in the same turn as their
wake-up. On Python 3.11, asyncio.wait_for loses such a cancel: the loop went round again
and the shutdown waited on it (the policy loop for UPDATE_INTERVAL, the fetch-work loop
for a minute). The turn is made exactly: asyncio runs ready callbacks in order."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from execd.daemon.fetch_work import FetchWorker
from tests.component.in_process_daemon import open_daemon


async def ends_when_cancelled_as_woken(task: asyncio.Task[Any], wake: asyncio.Event) -> bool:
    for _ in range(10):  # let it reach its wait
        await asyncio.sleep(0)
    assert not task.done()
    wake.set()
    await asyncio.sleep(0)  # one turn: the wait completes, its caller not yet resumed
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=10)  # a bound on a hang, not a timing
    return task in done and task.cancelled()


def test_the_policy_loop_ends_when_cancelled_as_it_is_woken(tmp_path: Path) -> None:
    async def scenario() -> bool:
        with open_daemon(tmp_path, "UPDATE_INTERVAL = 300\n") as daemon:
            loop = asyncio.get_running_loop().create_task(daemon._update_loop())
            return await ends_when_cancelled_as_woken(loop, daemon.wake)

    assert asyncio.run(scenario())


def test_the_fetch_work_loop_ends_when_cancelled_as_it_is_woken(tmp_path: Path) -> None:
    async def scenario() -> bool:
        with open_daemon(tmp_path) as daemon:
            fetch = FetchWorker(daemon)
            loop = asyncio.get_running_loop().create_task(fetch.run())
            return await ends_when_cancelled_as_woken(loop, fetch.wake)

    assert asyncio.run(scenario())
