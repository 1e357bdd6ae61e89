"""The cost of the daemon-level attributes on every slot ad (pool mode,
execd/daemon/pool_daemon_attrs.py) and of timing the event loop's select for the duty
cycle (execd/daemon/self_monitor.py).

Reports: microseconds per slot ad in one advertising round of 1,000 slots (the shared
part built once per round), the same with the round cache defeated (a counted event
before every ad: the worst case), and the cost per event-loop iteration of the timed
select (an idle loop of zero-timeout iterations, with and without the wrapper).

Run: .venv/bin/python bench/bench_daemon_attrs.py
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import classad2

from execd.config.loader import load_config
from execd.config.settings import load_settings
from execd.daemon.pool_daemon_attrs import DaemonAttributes
from execd.daemon.self_monitor import DutyCycle
from execd.daemon.startd_stats import StartdStats

SLOTS = 1000
ITERATIONS = 100_000


def attributes(tmp: Path) -> tuple[DaemonAttributes, Any]:
    config = tmp / "execd.conf"
    config.write_text("")
    daemon = SimpleNamespace(
        startd_stats=StartdStats(), settings=load_settings(load_config(config)),
        engine=SimpleNamespace(slots={f"slot1_{i}": None for i in range(SLOTS)}),
        paths=SimpleNamespace(execute=tmp))  # fmt: skip
    member = SimpleNamespace(daemon=daemon, address="<127.0.0.1:9618?addrs=127.0.0.1-9618>",
                             server=SimpleNamespace(open_connections=lambda: 0),
                             security=SimpleNamespace(sessions={}))  # fmt: skip
    return DaemonAttributes(member), daemon  # type: ignore[arg-type]


def per_slot_ad(tmp: Path) -> tuple[float, float]:
    built, daemon = attributes(tmp)
    ad = classad2.ClassAd({"PartitionableSlot": False})
    built.for_slot("slot1_0", ad)  # warm up
    t0 = time.perf_counter()
    for i in range(SLOTS):
        built.for_slot(f"slot1_{i}", ad)
    cached = (time.perf_counter() - t0) / SLOTS
    t0 = time.perf_counter()
    for i in range(SLOTS):
        daemon.startd_stats.count("JobStarts")
        built.for_slot(f"slot1_{i}", ad)
    return cached, (time.perf_counter() - t0) / SLOTS


async def loop_iterations(timed: bool) -> float:
    if timed:
        DutyCycle(1200, 60).install(asyncio.get_running_loop())
    t0 = time.perf_counter()
    for _ in range(ITERATIONS):
        await asyncio.sleep(0)  # one loop iteration, one select(0)
    return (time.perf_counter() - t0) / ITERATIONS


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cached, uncached = per_slot_ad(Path(tmp))
    print(f"daemon attributes per slot ad, {SLOTS} slots a round: {cached * 1e6:.1f} us "
          f"(shared part built once); rebuilt for every ad: {uncached * 1e6:.1f} us")
    plain = asyncio.run(loop_iterations(False))
    timed = asyncio.run(loop_iterations(True))
    print(f"event-loop iteration: {plain * 1e6:.2f} us plain, {timed * 1e6:.2f} us with the "
          f"timed select (+{(timed - plain) * 1e6:.2f} us)")


if __name__ == "__main__":
    main()
