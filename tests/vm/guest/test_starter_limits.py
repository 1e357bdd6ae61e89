"""The real starter on a kernel with every cgroup v2 controller: limits enforced by the
kernel, the OOM hold, the peak resident set in the report, and the job's leaf."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from execd.cgroups.tree import CgroupTree
from execd.starter.launcher import launch_starter
from execd.starter.spec import StarterSpec


def run_job(tree: CgroupTree, workdir: Path, script: str, **kw: object) -> dict[str, object]:
    spec = StarterSpec(
        job_id="1.0", slot_name="slot1_1", cmd="/bin/sh", args=["-c", script], env={},
        owner="nobody", execute_dir=str(workdir / "execute"),
        report_path=str(workdir / "report.json"),
        cgroup_mount=str(tree.hierarchy.mount),
        base_cgroup=str(tree.base.relative_to(tree.hierarchy.mount)),
        iwd=str(workdir / "iwd"), stdout="out.txt", stderr="err.txt", polling_interval=0.5,
    )._replace(**kw)
    handle = launch_starter(spec, str(workdir / "spec.json"), str(workdir / "starter.log"))
    handle.wait(timeout=120)
    return handle.report()


def test_controllers_are_there(tree: CgroupTree) -> None:
    assert {"memory", "cpu", "pids"} <= tree.controllers


def test_memory_limit_holds_the_job_with_code_34(tree: CgroupTree, workdir: Path) -> None:
    # 200 MB through a pipe into a program that keeps it: tail must buffer it all
    report = run_job(tree, workdir, "head -c 200M /dev/zero | tail -c 200M > /dev/null",
                     memory_mb=50, disable_swap=True)
    assert report["HoldReasonCode"] == 34
    assert report["HoldReasonSubCode"] == 102
    assert "cgroup memory limit of 50 megabytes" in str(report["HoldReason"])
    kernel_part = str(report["CgroupEnforcement"]).split(";")[0]
    assert "memory" in kernel_part, report["CgroupEnforcement"]  # enforced by the kernel


def test_memory_peak_is_reported(tree: CgroupTree, workdir: Path) -> None:
    # tail holds its 64 MiB buffer for 2 s (the reader sleeps): measured (every 0.5 s)
    script = "head -c 64M /dev/zero | tail -c 64M | (sleep 2; cat > /dev/null)"
    report = run_job(tree, workdir, script, memory_mb=512)
    assert report["ExitCode"] == 0
    # MB; the largest resident set measured (anon + shmem, as condor_starter's), though
    # the job freed it before it ended
    assert int(str(report["MemoryUsage"])) >= 60


def test_pids_max_stops_a_fork_bomb(tree: CgroupTree, workdir: Path) -> None:
    script = "i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done; wait"
    report = run_job(tree, workdir, script, pids_max=20)
    assert int(str(report["NumProcesses"])) <= 20
    errors = (workdir / "iwd" / "err.txt").read_text().lower()
    assert "fork" in errors  # the shell was refused a fork by the kernel


def test_job_sees_its_leaf_and_is_alone_in_it(tree: CgroupTree, workdir: Path) -> None:
    script = (
        "grep '^0::' /proc/self/cgroup; "
        "exec cat /sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/cgroup.procs"
    )
    report = run_job(tree, workdir, script)
    assert report["ExitCode"] == 0
    lines = (workdir / "iwd" / "out.txt").read_text().split()
    assert lines[0].endswith("/slot1_1.slice/job")
    assert len(lines[1:]) == 1  # exactly one pid: cat itself


def test_the_jobs_slice_carries_its_limits(tree: CgroupTree, workdir: Path) -> None:
    """What the job's own slice says: swap off, cpu.weight = 100 x Cpus, the memory
    limit, the pids limit, and the whole group killed together on OOM."""
    script = (
        "s=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/..; "
        "cat $s/memory.swap.max $s/cpu.weight $s/memory.max $s/pids.max $s/memory.oom.group"
    )
    report = run_job(tree, workdir, script, cpus=3.0, memory_mb=100, pids_max=50,
                     disable_swap=True)
    assert report["ExitCode"] == 0, (workdir / "iwd" / "err.txt").read_text()
    swap, weight, memory, pids, group = (workdir / "iwd" / "out.txt").read_text().split()
    assert swap == "0"
    assert weight == "300"
    assert memory == str(100 * 1024 * 1024)
    assert pids == "50"
    assert group == "1"


def _cpu_usec(tree: CgroupTree, slot: str) -> int:
    stat = (tree.base / f"{slot}.slice" / "cpu.stat").read_text()
    return int(dict(line.split() for line in stat.splitlines())["usage_usec"])


def test_cpu_weight_shares_a_contended_cpu_by_cpus(tree: CgroupTree, workdir: Path) -> None:
    """Two busy jobs pinned to one CPU, one with Cpus = 1 and one with Cpus = 3: the
    kernel gives the second about three times the CPU time of the first."""
    handles = {}
    for slot, cpus in (("slot1_1", 1.0), ("slot1_2", 3.0)):
        spec = StarterSpec(
            job_id=f"{slot}.0", slot_name=slot, cmd="/usr/bin/taskset",
            args=["-c", "0", "/bin/sh", "-c", "while :; do :; done"], env={},
            owner="nobody", execute_dir=str(workdir / "execute"),
            report_path=str(workdir / f"{slot}.json"), cgroup_mount=str(tree.hierarchy.mount),
            base_cgroup=str(tree.base.relative_to(tree.hierarchy.mount)),
            iwd=str(workdir / "iwd"), stdout=f"{slot}.out", stderr=f"{slot}.err",
            polling_interval=0.5, cpus=cpus)
        handles[slot] = launch_starter(spec, str(workdir / f"{slot}.spec.json"),
                                       str(workdir / f"{slot}.log"))
    try:
        # Wait (on the kernel's own counters) until the pair has used 3 s of CPU together.
        deadline = time.monotonic() + 120
        while True:
            light = heavy = 0
            with contextlib.suppress(FileNotFoundError, KeyError):
                light, heavy = _cpu_usec(tree, "slot1_1"), _cpu_usec(tree, "slot1_2")
            if light + heavy >= 3_000_000 and light > 0:
                break
            assert time.monotonic() < deadline, f"only {light + heavy} us of CPU in 120 s"
            time.sleep(0.2)
        assert 2.0 < heavy / light < 4.5, (light, heavy)
    finally:
        for handle in handles.values():
            handle.hard_kill()
        for handle in handles.values():
            handle.wait(timeout=60)
