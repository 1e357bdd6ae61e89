"""Limit writes, controller enabling and OOM counters through the recording fake seam."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_cgroupfs import RecordingCgroupFS

from execd.cgroups.discovery import Hierarchy, discover
from execd.cgroups.limits import LimitSettings, plan_limits
from execd.cgroups.tree import BlockIO, CgroupTree
from execd.errors import CgroupError

MOUNT = Path("/sys/fs/cgroup")
FULL = frozenset({"cpu", "memory", "pids", "io"})
MB = 1024 * 1024


def full_tree() -> tuple[RecordingCgroupFS, CgroupTree]:
    fs = RecordingCgroupFS()
    fs.add_cgroup(MOUNT)
    tree = CgroupTree(fs, Hierarchy(MOUNT, FULL), "htcondor")
    tree.setup(daemon_pid=4242)
    return fs, tree


def test_discovery_prefers_the_pure_v2_mount() -> None:
    fs = RecordingCgroupFS()
    fs.add_cgroup(MOUNT)
    mounts = (
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
        "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n"
    )
    h = discover(fs, mounts)
    assert h.mount == MOUNT
    assert h.has_limits


def test_no_cgroup2_mount_is_a_clear_error() -> None:
    with pytest.raises(CgroupError, match="no cgroup2 hierarchy"):
        discover(RecordingCgroupFS(), "proc /proc proc rw 0 0\n")


def test_setup_moves_the_daemon_into_a_leaf_then_enables_controllers_top_down() -> None:
    fs, tree = full_tree()
    # io for its accounting alone (io.stat: the job's block I/O)
    assert fs.writes == [
        (MOUNT / "htcondor/daemon/cgroup.procs", "4242"),
        (MOUNT / "cgroup.subtree_control", "+cpu +memory +pids +io"),
        (MOUNT / "htcondor/cgroup.subtree_control", "+cpu +memory +pids +io"),
    ]
    assert tree.controllers == {"cpu", "memory", "pids", "io"}


def test_block_io_sums_io_stat_over_devices_and_is_unmeasured_without_io() -> None:
    fs, tree = full_tree()
    job = tree.job("slot1_2")
    job.create()
    fs.files[job.slice / "io.stat"] = (
        "8:0 rbytes=4096 wbytes=8388608 rios=1 wios=64 dbytes=0 dios=0\n"
        "253:1 rbytes=1024 wbytes=0 rios=2 wios=0 dbytes=0 dios=0\n")  # fmt: skip
    assert job.block_io() == BlockIO(read_bytes=5120, write_bytes=8388608, reads=3, writes=64)
    fs.files[job.slice / "io.stat"] = ""  # no I/O yet: zeros, measured
    assert job.block_io() == BlockIO(0, 0, 0, 0)
    # the controller-less hierarchy (this host's): none, not zeros
    bare = CgroupTree(fs, Hierarchy(MOUNT, frozenset()), "htcondor").job("slot1_2")
    assert bare.block_io() is None


def test_hard_policy_writes_every_kernel_limit_on_the_slice() -> None:
    fs, tree = full_tree()
    job = tree.job("slot1_2")
    job.create()
    settings = LimitSettings(
        memory_mb=512, cpus=2, disable_swap=True, pids_max=1000, cpu_max_cpus=1.5
    )
    plan = plan_limits(settings, tree.controllers)
    fs.writes.clear()
    job.apply_limits(plan.writes)
    written = {p.relative_to(job.slice).as_posix(): v for p, v in fs.writes}
    assert written == {
        "memory.max": str(512 * MB),
        "memory.swap.max": "0",
        "memory.oom.group": "1",
        "cpu.weight": "200",
        "cpu.max": "150000 100000",
        "pids.max": "1000",
    }
    assert plan.policy == []
    assert "memory.max=512MB" in plan.describe()


def test_soft_policy_protects_instead_of_capping() -> None:
    plan = plan_limits(LimitSettings(memory_mb=256, cpus=1, memory_policy="soft"), FULL)
    assert "memory.max" not in plan.writes
    assert plan.writes["memory.low"] == str(256 * MB)


def test_custom_policy_uses_the_expression_value_and_none_sets_nothing() -> None:
    custom = LimitSettings(memory_mb=256, cpus=1, memory_policy="custom", custom_hard_memory_mb=300)
    assert plan_limits(custom, FULL).writes["memory.max"] == str(300 * MB)
    none = plan_limits(LimitSettings(memory_mb=256, cpus=1, memory_policy="none"), FULL)
    assert "memory.max" not in none.writes
    assert "memory.low" not in none.writes


def test_unknown_policy_names_the_knob() -> None:
    with pytest.raises(CgroupError, match="CGROUP_MEMORY_LIMIT_POLICY"):
        plan_limits(LimitSettings(memory_mb=1, cpus=1, memory_policy="strict"), FULL)


def test_controller_less_host_enforces_memory_by_policy_and_says_so() -> None:
    plan = plan_limits(
        LimitSettings(memory_mb=128, cpus=1, disable_swap=True, pids_max=10), frozenset()
    )
    assert plan.writes == {}
    assert plan.policy_memory_mb == 128
    text = plan.describe()
    assert text.startswith("kernel: none; policy: memory<=128MB")
    assert "unenforced: swap, cpu.weight, pids.max" in text


def test_oom_counters_come_from_memory_events() -> None:
    fs, tree = full_tree()
    job = tree.job("slot1_1")
    job.create()
    fs.files[job.slice / "memory.events"] = (
        "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 1\n"
    )
    assert job.oom_events()["oom_kill"] == 1
    assert job.oom_events()["oom_group_kill"] == 1


def test_kill_falls_back_to_sigkill_each_pid_when_cgroup_kill_is_missing() -> None:
    fs, tree = full_tree()
    job = tree.job("slot1_1")
    job.create()
    fs.files[job.leaf / "cgroup.procs"] = "101\n102\n"
    job.kill()
    assert sorted(fs.killed) == [101, 102]
    assert job.pids() == []
