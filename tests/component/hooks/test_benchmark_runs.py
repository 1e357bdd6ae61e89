"""The benchmarks run in a worker thread: the event loop keeps serving while they measure."""

from __future__ import annotations

import asyncio

import pytest

from execd.hooks.benchmarks import Benchmarks, run_benchmarks


@pytest.mark.asyncio
async def test_event_loop_keeps_running_during_benchmarks() -> None:
    ticks = 0
    stop = asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    benchmarks = Benchmarks()
    result = await run_benchmarks(benchmarks, now=1_700_000_000)
    stop.set()
    await ticker
    assert ticks > 1  # the loop ran other work while the measurement was under way
    assert result.mips > 0 and result.kflops > 0 and result.last_benchmark == 1_700_000_000
    again = await run_benchmarks(benchmarks, now=1_700_000_600)
    assert again.runs == 2 and again.last_benchmark == 1_700_000_600
