"""How long work keeps an event loop from other tasks: inside `async with LoopGaps() as
gaps`, a task asks for the loop every millisecond and records each gap between its
turns beyond that millisecond (what a claim activation or a shadow's message would wait)."""

from __future__ import annotations

import asyncio
import time
from types import TracebackType

TICK_S = 0.001


class LoopGaps:
    def __init__(self) -> None:
        self.gaps: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            self.gaps.append(now - last - TICK_S)
            last = now

    async def __aenter__(self) -> LoopGaps:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0.05)  # ticking before the work starts
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:  # fmt: skip
        assert self._task is not None
        await asyncio.sleep(0.05)  # a turn after the work: its last gap is recorded
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    def longest(self) -> float:
        return max(self.gaps, default=0.0)

    def p99(self) -> float:
        ordered = sorted(self.gaps)
        return ordered[len(ordered) * 99 // 100] if ordered else 0.0
