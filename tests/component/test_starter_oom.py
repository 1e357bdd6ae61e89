"""OOM handling of the starter on a full cgroup v2 host, through the fake seam."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_cgroupfs import RecordingCgroupFS

from execd.cgroups.discovery import Hierarchy
from execd.cgroups.tree import CgroupTree
from execd.starter.report import oom_outcome
from execd.starter.run import Starter
from execd.starter.spec import StarterSpec

MOUNT = Path("/sys/fs/cgroup")
MB = 1024 * 1024


def starter(always_hold: bool = True) -> tuple[RecordingCgroupFS, Starter]:
    fs = RecordingCgroupFS()
    fs.add_cgroup(MOUNT)
    CgroupTree(fs, Hierarchy(MOUNT, frozenset({"cpu", "memory", "pids"})), "htcondor").setup()
    spec = StarterSpec(
        job_id="7.0",
        slot_name="slot1_3",
        cmd="/bin/true",
        args=[],
        env={},
        owner="nobody",
        execute_dir="/x",
        report_path="/x/r",
        cgroup_mount=str(MOUNT),
        base_cgroup="htcondor",
        memory_mb=100,
        cpus=2,
        always_hold_on_oom=always_hold,
    )
    s = Starter(spec, fs)
    s.cgroup.create()
    s.cgroup.apply_limits(s.plan.writes)
    return fs, s


def test_the_slice_gets_the_slot_limits_on_a_full_v2_host() -> None:
    fs, s = starter()
    slice_ = MOUNT / "htcondor/slot1_3.slice"
    assert fs.files[slice_ / "memory.max"] == str(100 * MB)
    assert fs.files[slice_ / "memory.oom.group"] == "1"
    assert fs.files[slice_ / "cpu.weight"] == "200"
    assert s.plan.policy_memory_mb is None


def test_oom_kill_holds_with_code_34_subcode_102_and_htcondor_message() -> None:
    fs, s = starter()
    fs.files[s.cgroup.slice / "memory.events"] = "oom 1\noom_kill 1\noom_group_kill 0\n"
    s.measured.max_image_bytes = 99 * MB
    s.check_oom()
    assert s.report["HoldReasonCode"] == 34
    assert s.report["HoldReasonSubCode"] == 102
    # HTCondor's starter's words to the letter (vanilla_proc.cpp): two spaces before
    # "Consider", as in the reference half of tests/vm/guest/test_pool_oom.py
    # the usage is the limit, whatever was measured last, with STARTER_ALWAYS_HOLD_ON_OOM
    # (vanilla_proc.cpp's outOfMemoryEvent)
    assert s.report["HoldReason"] == (
        "Job has gone over cgroup memory limit of 100 megabytes. Last measured usage: "
        "100 megabytes.  Consider resubmitting with a higher request_memory."
    )


def test_oom_hold_says_the_measured_peak_when_not_always_holding() -> None:
    fs, s = starter(always_hold=False)
    fs.files[s.cgroup.slice / "memory.events"] = "oom_kill 1\n"
    s.measured.max_image_bytes = 95 * MB
    s.check_oom()
    assert "Last measured usage: 95 megabytes." in s.report["HoldReason"]


def test_oom_well_under_the_limit_evicts_when_not_always_holding() -> None:
    fs, s = starter(always_hold=False)
    fs.files[s.cgroup.slice / "memory.events"] = "oom_group_kill 1\n"
    s.measured.max_image_bytes = 50 * MB
    s.check_oom()
    assert "HoldReasonCode" not in s.report
    assert s.exit_reason == "evicted_oom"


def test_no_oom_kill_changes_nothing() -> None:
    fs, s = starter()
    fs.files[s.cgroup.slice / "memory.events"] = "oom 2\noom_kill 0\n"
    s.check_oom()
    assert "HoldReasonCode" not in s.report
    assert s.exit_reason == "exited"


@pytest.mark.parametrize(
    ("used", "always", "want"),
    [(89, False, "evict"), (90, False, "hold"), (10, True, "hold")],
)
def test_the_90_percent_boundary(used: int, always: bool, want: str) -> None:
    assert oom_outcome({"oom_kill": 1}, 100, used, always) == want
