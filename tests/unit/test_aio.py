"""Waiting and cancelling without losing a cancellation (execd.aio)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from execd.aio import cancel_until_done, wait_event


def test_wait_event_says_whether_the_event_came_or_the_time_ran_out() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        event = asyncio.Event()
        timed_out = await wait_event(event, 0.01)
        asyncio.get_running_loop().call_soon(event.set)
        came = await wait_event(event, 60)
        return timed_out, came, await wait_event(event, 0)

    assert asyncio.run(scenario()) == (False, True, True)


def test_a_cancel_arriving_as_the_event_is_set_is_not_lost() -> None:
    async def scenario() -> None:
        event = asyncio.Event()
        waiter = asyncio.get_running_loop().create_task(wait_event(event, 60))
        await asyncio.sleep(0)
        event.set()  # in the same turn as the cancel: the waiter is resumed after both
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(scenario())


def test_cancel_until_done_ends_a_task_that_ignored_the_first_cancel() -> None:
    async def stubborn(started: asyncio.Event) -> None:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):  # lost, as 3.11's wait_for can
            await asyncio.Event().wait()
        await asyncio.Event().wait()

    async def scenario() -> bool:
        started = asyncio.Event()
        task = asyncio.get_running_loop().create_task(stubborn(started))
        await started.wait()
        await cancel_until_done([task], every=0.01)
        return task.cancelled()

    assert asyncio.run(scenario())
