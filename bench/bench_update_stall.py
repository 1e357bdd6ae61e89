"""How long one pool job's update keeps execd's event loop from other work: the update's
values (execd.daemon.pool_job_attrs.starter_update) walk the job's sandbox, here one of
ENTRIES files in 100 directories, while a task asks for the loop every millisecond.
Measured twice in one run: the walk on the loop (as execd did before PoolJob.usage moved
it to a worker thread) and in a worker thread (as PoolJob.usage runs it now).

Reports, for each: the longest gap between the ticker's turns (what a claim activation,
a shadow's message or another job's update would wait at most) and the update's time.

Run: .venv/bin/python bench/bench_update_stall.py [ENTRIES]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loop_gaps import LoopGaps

from execd.daemon.pool_job_attrs import starter_update

STATUS = {"JobPid": 1, "NumProcesses": 1, "ImageSize": 1024, "ResidentSetSize": 1024}


def make_sandbox(root: Path, entries: int) -> Path:
    sandbox = root / "sandbox"
    for d in range(100):
        (sandbox / f"d{d}").mkdir(parents=True)
    for n in range(entries):
        (sandbox / f"d{n % 100}" / f"f{n}").write_bytes(b"x")
    (sandbox / "_condor_stdout").write_text("")
    (sandbox / "_condor_stderr").write_text("")
    return sandbox


def update(sandbox: Path) -> dict[str, Any]:
    return starter_update(STATUS, int(time.time()), False, sandbox,
                          ("_condor_stdout", "_condor_stderr"))  # fmt: skip


async def stall(run: Callable[[], Awaitable[dict[str, Any]]]) -> tuple[float, float, int]:
    """(longest gap between the loop's turns, the update's time, entries counted)."""
    async with LoopGaps() as gaps:
        began = time.monotonic()
        values = await run()
        took = time.monotonic() - began
    return gaps.longest(), took, int(values["ScratchDirFileCount"])


async def inline(sandbox: Path) -> dict[str, Any]:
    return update(sandbox)


async def measure(sandbox: Path) -> None:
    for name, run in (("on the loop (before)", lambda: inline(sandbox)),
                      ("in a worker thread (now)", lambda: asyncio.to_thread(update, sandbox))):
        gap, took, counted = await stall(run)
        print(f"{name:26} longest loop stall {gap * 1000:8.1f} ms; update {took * 1000:8.1f} ms;"
              f" {counted} entries")  # fmt: skip


def main() -> None:
    entries = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with tempfile.TemporaryDirectory(prefix="execd-bench-") as tmp:
        sandbox = make_sandbox(Path(tmp), entries)
        asyncio.run(measure(sandbox))


if __name__ == "__main__":
    main()
