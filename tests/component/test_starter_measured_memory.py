"""The resident set the starter reports in its status (the job updates' ResidentSetSize)
is the largest it measured so far, as condor_starter's (VanillaProc's max_rss), through
the fake cgroup seam on a full cgroup v2 host."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fake_cgroupfs import RecordingCgroupFS

from execd.cgroups.discovery import Hierarchy
from execd.cgroups.tree import CgroupTree
from execd.starter.run import Starter
from execd.starter.spec import StarterSpec

MOUNT = Path("/sys/fs/cgroup")
MB = 1024 * 1024


def starter(status_path: Path) -> tuple[RecordingCgroupFS, Starter]:
    fs = RecordingCgroupFS()
    fs.add_cgroup(MOUNT)
    CgroupTree(fs, Hierarchy(MOUNT, frozenset({"cpu", "memory", "pids"})), "htcondor").setup()
    spec = StarterSpec(job_id="7.0", slot_name="slot1_3", cmd="/bin/true", args=[], env={},
                       owner="nobody", execute_dir="/x", report_path="/x/r",
                       cgroup_mount=str(MOUNT), base_cgroup="htcondor", memory_mb=1000,
                       cpus=1, status_path=str(status_path))  # fmt: skip
    s = Starter(spec, fs)
    s.cgroup.create()
    s.started = time.monotonic()  # as start() sets it
    return fs, s


def measured(fs: RecordingCgroupFS, s: Starter, memory: int, user_usec: int) -> dict[str, object]:
    fs.files[s.cgroup.slice / "memory.current"] = str(memory)
    fs.files[s.cgroup.slice / "cpu.stat"] = f"usage_usec {user_usec}\nuser_usec {user_usec}\n"
    s.measure()
    s.publish_status()
    status: dict[str, object] = json.loads(Path(s.spec.status_path or "").read_text())
    return status


def test_status_resident_set_is_the_peak_measured_not_the_current(tmp_path: Path) -> None:
    fs, s = starter(tmp_path / "status.json")
    assert measured(fs, s, 80 * MB, 1_500_000)["ResidentSetSize"] == 80 * 1024
    # the job freed its memory: the next measurement still reports the peak
    after = measured(fs, s, 10 * MB, 2_700_000)
    assert after["ResidentSetSize"] == 80 * 1024
    # the status keeps CPU's fraction (CPUsUsage is computed from it); the job updates
    # send whole seconds (pool_job_attrs.whole_seconds)
    assert after["RemoteUserCpu"] == 2.7
    assert measured(fs, s, 90 * MB, 2_800_000)["ResidentSetSize"] == 90 * 1024
