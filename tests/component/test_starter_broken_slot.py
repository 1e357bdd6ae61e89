"""A job cgroup that cannot be emptied: the starter reports SlotBrokenReason, keeps the
slice (its processes are still there), and still writes its report."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from fake_cgroupfs import RecordingCgroupFS

from execd.cgroups.discovery import Hierarchy
from execd.cgroups.tree import CgroupTree
from execd.starter.launcher import StarterHandle
from execd.starter.run import Starter
from execd.starter.spec import StarterSpec

MOUNT = Path("/sys/fs/cgroup")


class UnkillableFS(RecordingCgroupFS):
    """A kernel on which SIGKILL does not take (a process stuck in the kernel for good)."""

    def kill_pid(self, pid: int) -> None:
        self.killed.append(pid)


def test_an_unkillable_process_marks_the_slot_broken_in_the_report(tmp_path: Path) -> None:
    fs = UnkillableFS()
    fs.add_cgroup(MOUNT)
    CgroupTree(fs, Hierarchy(MOUNT, frozenset()), "htcondor").setup()
    (tmp_path / "dir_1").mkdir()
    spec = StarterSpec(job_id="7.0", slot_name="slot1_3", cmd="/bin/true", args=[], env={},
                       owner="nobody", execute_dir=str(tmp_path),
                       report_path=str(tmp_path / "report.json"),
                       cgroup_mount=str(MOUNT), base_cgroup="htcondor")
    s = Starter(spec, fs)
    s.cgroup.create()
    s.cgroup.kill_timeout = 0.05
    fs.files[s.cgroup.procs_file] = "4242"
    s.scratch = str(tmp_path / "dir_1")
    s.started = time.monotonic()
    s.status = 0
    s.finish()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["SlotBrokenReason"].startswith(
        "/sys/fs/cgroup/htcondor/slot1_3.slice still holds 1 processes after")
    assert 4242 in fs.killed
    assert fs.exists(s.cgroup.slice), "a slice with processes in it is not removed"
    assert report["ExitCode"] == 0
    assert not (tmp_path / "dir_1").exists()


def test_killing_the_starter_family_writes_its_report_naming_the_broken_slot(
    tmp_path: Path,
) -> None:
    fs = UnkillableFS()
    fs.add_cgroup(MOUNT)
    CgroupTree(fs, Hierarchy(MOUNT, frozenset()), "htcondor").setup()
    spec = StarterSpec(job_id="8.0", slot_name="slot1_4", cmd="/bin/true", args=[], env={},
                       owner="nobody", execute_dir=str(tmp_path),
                       report_path=str(tmp_path / "report.json"),
                       cgroup_mount=str(MOUNT), base_cgroup="htcondor")
    job = CgroupTree(fs, Hierarchy(MOUNT, frozenset()), "htcondor").job("slot1_4")
    job.create()
    fs.files[job.procs_file] = "4243"
    # A stuck starter (a real process that ignores everything but SIGKILL).
    stuck = subprocess.Popen(["sleep", "600"])
    handle = StarterHandle(spec, stuck)
    handle.kill_family(fs=fs, timeout=0.05)
    assert stuck.wait(timeout=10) == -9
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ExitReason"] == "starter_killed"
    assert "slot1_4.slice still holds 1 processes" in report["SlotBrokenReason"]
