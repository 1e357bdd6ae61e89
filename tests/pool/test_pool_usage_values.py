"""The usage values a job's starter reports, on execd and on the pool's condor_startd,
for the same job: one that holds a 64 MiB buffer (dd's) for 8 s, burning CPU, then
frees it, writes 1 MiB into its sandbox and waits for the test to let it end.
condor_startd here runs without cgroups: its procd sees the job's processes only at
its snapshots, every PID_SNAPSHOT_INTERVAL (15 s by default; the smallest interval of
the families it tracks, which each condor_starter reads as it registers its job's). The
reference run sets it to 1 s (a config.d file), so that several snapshots see the
buffer and dd's CPU however late a loaded host schedules them; execd's starter
measures every CGROUP_POLLING_INTERVAL, 1 s here too.

- `ResidentSetSize` in a periodic update after the memory was freed is the peak seen so
  far (condor_starter's VanillaProc keeps the largest resident set it measured), not
  the current resident set: read from the slot ad of an update that carries the 1 MiB
  written after the free (its `DiskUsage`).
- `RemoteUserCpu` / `RemoteSysCpu` in the schedd's history are whole seconds on both
  (condor_starter's ProcFamilyUsage counts CPU in whole seconds, truncated).
- `ScratchDirFileCount` for the same job: condor_starter's is 3 more, the entries of
  its own layout of the job's directory (STARTER_NESTED_SCRATCH: `scratch/`,
  `htcondor/`, `user/`), which execd's sandbox does not have; the job's own files,
  `.chirp.config`, `.job.ad`, `.machine.ad` and `.update.ad` (condor's in `htcondor/`)
  are counted alike (docs/pool.md "Differences").
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
from test_pool_job_update_attrs import schedd_history
from test_pool_jobs import PLAIN_SUBMIT, on_both, submit_files

WAIT_S = 90
SCRIPT = """#!/bin/sh
timeout 8 dd if=/dev/zero of=/dev/null bs=64M 2>/dev/null
dd if=/dev/zero of=freed.bin bs=1024 count=1024 conv=fsync 2>/dev/null
find .. -mindepth 1 2>/dev/null | sort
while [ ! -e "$1" ]; do sleep 0.2; done
"""
MIB_KB = 1024
# What condor_starter's count has and execd's does not (by name, in its dir_<pid>)
CONDOR_LAYOUT = Counter({"scratch": 1, "htcondor": 1, "user": 1})
# execd's starter measures every CGROUP_POLLING_INTERVAL (5 s by default): 1 s so that
# the 8 s of the buffer are measured several times
EXTRA = "CGROUP_POLLING_INTERVAL = 1\n"
# condor_startd's procd snapshots (15 s by default): 1 s, for the same reason
REFERENCE_CONFIG = "/etc/condor/config.d/99-execd-snapshot-interval.conf"


@contextlib.contextmanager
def snapshot_every_second(pool: harness.Pool) -> Iterator[None]:
    # each condor_starter reads it as it registers its job's family: no restart needed
    config = pool.host_path(REFERENCE_CONFIG)
    config.write_text("PID_SNAPSHOT_INTERVAL = 1\n")
    try:
        yield
    finally:
        config.unlink()


def job_slot(pool: harness.Pool, cluster: int, probe: Any) -> dict[str, Any] | None:
    return next((ad for ad in pool.status("-slots")
                 if ad.get("JobId") == f"{cluster}.0" and probe(ad)), None)  # fmt: skip


def run_job(pool: harness.Pool) -> dict[str, Any]:
    go = Path("/tmp") / f"execd-usage-{os.getpid()}-{pool._jobs}"  # the chroot's /tmp too
    job = submit_files(pool, PLAIN_SUBMIT.format(args=go, extra=""), {"job.sh": SCRIPT})
    try:
        after_free = harness.wait_for(
            "an update after the job freed its memory",
            lambda: job_slot(pool, job.cluster,
                             lambda ad: ad.get("DiskUsage", 0) >= MIB_KB), WAIT_S, 0.5)  # fmt: skip
        go.touch()
        job.wait_for_event("005", WAIT_S)
    finally:
        go.unlink(missing_ok=True)
    (record,) = schedd_history(pool, [job.cluster])
    return {"running": after_free, "record": record,
            "listing": (job.host_dir / "out.txt").read_text()}


def test_usage_values_as_condor_starters(running_pool: harness.RunningPool) -> None:
    ours, theirs = on_both(running_pool, run_job, EXTRA, snapshot_every_second)
    problems: list[Any] = []
    for who, seen in (("execd", ours), ("condor_startd", theirs)):
        running, record = seen["running"], seen["record"]
        # the peak (64 MiB of buffer), though the job holds a few MiB now (MemoryUsage,
        # an expression over it, follows: test_pool_job_attrs.py)
        if running["ResidentSetSize"] < 60 * MIB_KB:
            problems.append((who, "ResidentSetSize", running["ResidentSetSize"]))
        cpu = [record[a] for a in ("RemoteUserCpu", "RemoteSysCpu")]
        # 8 s of dd: whole seconds of CPU, truncated
        if not all(float(c).is_integer() for c in cpu) or not 1 <= sum(cpu) <= 9:
            problems.append((who, "cpu", cpu))
    # the job lists its directory's parent: condor_starter's dir_<pid>, execd's EXECUTE
    listed = [Counter(name for name in (Path(line).name for line in s["listing"].split())
                      if not name.startswith("dir_")) for s in (ours, theirs)]  # fmt: skip
    counts = [s["record"].get("ScratchDirFileCount") for s in (ours, theirs)]
    if (counts[1] - counts[0] != sum(CONDOR_LAYOUT.values())
            or listed[1] - listed[0] != CONDOR_LAYOUT or listed[0] - listed[1]):
        problems.append(("ScratchDirFileCount", counts, ours["listing"], theirs["listing"]))
    assert not problems, "\n".join(repr(p) for p in problems)
