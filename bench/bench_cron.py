"""Startd cron overhead: 20 Periodic jobs at a 1 s period merged into 64 slot ads.

Runs the CronManager for DURATION seconds with real /bin/sh hooks (each prints a
machine-wide attribute and one targeted at a SlotId). Reports the daemon's own CPU time
(RUSAGE_SELF: spawning, reading, parsing, merging) against the hooks' CPU time
(RUSAGE_CHILDREN), per hook run, and the event loop's lag behind a 10 ms ticker (also
measured idle first, for scale: on a busy shared host the idle loop lags too). The
ticker is an instrument, not the daemon: its own CPU rate, taken while idle (about 1% of
a core for 100 wake-ups a second), is subtracted in the "without the lag ticker" line,
which is the figure the 2% goal is about.

Run: PYTHONPATH=$PWD /work/venv/bin/python bench/bench_cron.py [seconds]
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import sys
import tempfile
import time
from pathlib import Path

from execd.classads import new_ad
from execd.hooks.cron import CronJobExit, CronManager, CronUpdate
from execd.hooks.cron_config import CronJobSpec, CronMode, CronSettings

JOBS = 20
SLOTS = 64
DURATION = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0


def cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def ticker(lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(0.01)
        lags.append(loop.time() - before - 0.01)


async def main() -> None:
    slot_ads = {f"slot1_{i}": new_ad({"Name": f"slot1_{i}@bench", "SlotID": i, "SlotTypeID": 1})
                for i in range(1, SLOTS + 1)}
    with tempfile.TemporaryDirectory() as tmp:
        specs = []
        for j in range(JOBS):
            hook = Path(tmp) / f"hook{j}"
            hook.write_text(f'#!/bin/sh\necho "Hook{j}Load = 0.{j}"\necho "- load"\n'
                            f'echo "Hook{j}Slot = true"\necho "SlotId = {j % SLOTS + 1}"\n'
                            'echo "- slot"\n')
            hook.chmod(0o755)
            specs.append(CronJobSpec(name=f"H{j}", executable=str(hook),
                                     mode=CronMode.PERIODIC, period=1.0))
        # HTCondor's default limits (JOB_LOAD 0.01 each, MAX_JOB_LOAD 0.1): 10 at once
        cron = CronSettings(jobs=tuple(specs))
        runs: list[CronJobExit] = []
        updates: list[CronUpdate] = []
        manager = CronManager(cron, slot_ads=lambda: slot_ads, on_update=updates.append,
                              on_exit=runs.append)
        idle_lags: list[float] = []  # the same ticker with nothing else running, for scale
        idle_cpu0, idle_wall0 = cpu(resource.RUSAGE_SELF), time.time()
        idle = asyncio.create_task(ticker(idle_lags))
        await asyncio.sleep(3)
        idle.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await idle
        # the ticker's own CPU rate, taken out of the daemon's figure below
        ticker_rate = (cpu(resource.RUSAGE_SELF) - idle_cpu0) / (time.time() - idle_wall0)
        lags: list[float] = []
        self0, child0, wall0 = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN), time.time()
        tasks = [asyncio.create_task(manager.run()), asyncio.create_task(ticker(lags))]
        await asyncio.sleep(DURATION)
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        wall = time.time() - wall0
        own = cpu(resource.RUSAGE_SELF) - self0
        hooks = cpu(resource.RUSAGE_CHILDREN) - child0
    merged = manager.slot_attributes()
    attrs_per_slot = sum(len(a) for a in merged.values()) / max(len(merged), 1)
    failed = sum(1 for r in runs if not r.result.ok)
    print(f"jobs={JOBS} slots={SLOTS} period=1s wall={wall:.1f}s")
    print(f"hook runs={len(runs)} ({len(runs) / wall:.1f}/s, failed {failed}), "
          f"ad updates={len(updates)}, attributes per slot={attrs_per_slot:.1f}")
    print(f"daemon CPU={own:.2f}s ({100 * own / wall:.1f}% of one core), "
          f"{1000 * own / max(len(runs), 1):.2f} ms per hook run")
    net = max(own - ticker_rate * wall, 0.0)
    print(f"daemon CPU without the lag ticker={net:.2f}s ({100 * net / wall:.1f}% of one core, "
          f"goal 2%), {1000 * net / max(len(runs), 1):.2f} ms per hook run")
    print(f"hooks' own CPU={hooks:.2f}s ({1000 * hooks / max(len(runs), 1):.2f} ms per run)")
    for label, series in (("idle loop", idle_lags), ("with cron", lags)):
        series.sort()
        print(f"event loop lag ({label}): median {1000 * series[len(series) // 2]:.2f} ms, "
              f"p99 {1000 * series[int(len(series) * 0.99)]:.2f} ms, "
              f"max {1000 * series[-1]:.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
