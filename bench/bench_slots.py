"""Carving, releasing and advertising 1,000 dynamic slots on a simulated big node.

A 1,024-CPU / 4 TB machine with 8 GPUs and one partitionable slot. Reports the time per
carve (job ad -> MODIFY_REQUEST_EXPR -> dynamic slot), per release, per slot ad, the
p-slot's roll-up of its 1,000 d-slots (Child<Attr> lists), and the daemon's RSS
growth per dynamic slot while all 1,000 slots and their ads are held
(goal: under 50 KB each).

Run: PYTHONPATH=$PWD /work/venv/bin/python bench/bench_slots.py
"""

from __future__ import annotations

import gc
import time

import psutil

from execd.classads import new_ad
from execd.machine.facts import GpuInfo, MachineFacts
from execd.slots.layout import build_layout, default_slot_types
from execd.slots.node import NodeSlots
from execd.slots.requests import RequestModifier
from execd.slots.rollup import RollupSettings, publish_child_summaries

N = 1000
GPUS = tuple(GpuInfo(f"GPU-{i:08x}", {"DeviceName": "NVIDIA H100 80GB HBM3", "Capability": 9.0,
                                      "GlobalMemoryMb": 81559}) for i in range(8))
FACTS = MachineFacts(detected_cpus=1024, detected_cores=512, detected_memory_mb=4 * 1024 * 1024,
                     total_cpus=1024, total_memory_mb=4 * 1024 * 1024,
                     total_disk_kb=100 * 1024**3, total_vm_kb=0, gpus=GPUS,
                     opsys_and_ver="Debian12", hostname="big.example")


def rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


def main() -> None:
    node = NodeSlots(FACTS, build_layout(default_slot_types(), FACTS))
    pslot = node.partitionable[1]
    modifier = RequestModifier()
    jobs = [new_ad({"RequestCpus": 1, "RequestMemory": 1000 + i, "RequestDisk": 100_000,
                    "RequestGPUs": 1 if i < 8 else 0}) for i in range(N)]
    # warm up the caches (parsed expressions, first allocations), then measure
    node.build_ads(now=0)

    base = rss()
    t0 = time.perf_counter()
    slots = [pslot.carve(modifier.request(job, custom_names=("GPUs",))) for job in jobs]
    t_carve = time.perf_counter() - t0

    t0 = time.perf_counter()
    ads = node.build_ads(now=int(time.time()), slot_attrs=())
    t_ads = time.perf_counter() - t0
    t0 = time.perf_counter()
    publish_child_summaries(ads, RollupSettings())
    t_rollup = time.perf_counter() - t0
    held = rss()
    assert len(ads) == N + 1 and pslot.free_cpus == 1024 - N
    assert len(ads[0].eval("ChildCpus")) == N

    t0 = time.perf_counter()
    for s in slots:
        pslot.release(s.sub_id)
    t_release = time.perf_counter() - t0
    assert pslot.free_cpus == 1024 and not pslot.dynamic

    print(f"machine: {FACTS.total_cpus:g} CPUs, {FACTS.total_memory_mb // 1024**2} TB memory, "
          f"{len(GPUS)} GPUs; {N} dynamic slots")
    print(f"carve   (request eval + carve): {t_carve / N * 1e6:8.1f} us per dynamic slot")
    print(f"release                       : {t_release / N * 1e6:8.1f} us per dynamic slot")
    print(f"build ads ({len(ads)} ads)          : {t_ads / len(ads) * 1e6:8.1f} us per ad")
    print(f"roll-up of {N} d-slots       : {t_rollup * 1e3:8.1f} ms "
          f"({t_rollup / N * 1e6:.1f} us per d-slot)")
    print(f"RSS growth with {N} slots + ads held: {(held - base) / 1024:.0f} KB total, "
          f"{(held - base) / N / 1024:.1f} KB per dynamic slot (goal < 50 KB)")


if __name__ == "__main__":
    main()
