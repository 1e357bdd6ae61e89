"""STARTER_HIDE_GPU_DEVICES' BPF device program on a stock kernel with every cgroup v2
controller (the host's tier runs it on the controller-less hybrid hierarchy): the job,
as nobody in its real cgroup, cannot open the devices its starter was told to hide."""

from __future__ import annotations

from pathlib import Path

from execd.cgroups.tree import CgroupTree
from execd.starter.launcher import launch_starter
from execd.starter.spec import StarterSpec

# /dev/zero (1:5) hidden, /dev/null (1:3) not: each opened for reading and for writing.
PROBE = (
    "for d in null zero; do for m in r w; do "
    "if [ $m = r ]; then (: < /dev/$d) 2>/dev/null; else (: > /dev/$d) 2>/dev/null; fi "
    "&& echo $d $m ok || echo $d $m denied; done; done; "
    "python3 -c \"import os; os.open('/dev/zero', os.O_RDONLY)\" 2>&1 | tail -1"
)


def test_a_hidden_device_cannot_be_opened_by_the_job(tree: CgroupTree, workdir: Path) -> None:
    assert {"memory", "cpu", "pids"} <= tree.controllers  # a pure v2 kernel, not the host's
    spec = StarterSpec(
        job_id="1.0", slot_name="slot1_1", cmd="/bin/sh", args=["-c", PROBE], env={},
        owner="nobody", execute_dir=str(workdir / "execute"),
        report_path=str(workdir / "report.json"), cgroup_mount=str(tree.hierarchy.mount),
        base_cgroup=str(tree.base.relative_to(tree.hierarchy.mount)),
        iwd=str(workdir / "iwd"), stdout="out.txt", stderr="err.txt", memory_mb=256,
        hide_devices=[[1, 5]],
    )
    handle = launch_starter(spec, str(workdir / "spec.json"), str(workdir / "starter.log"))
    handle.wait(timeout=120)
    report = handle.report()
    assert report["ExitCode"] == 0, (workdir / "starter.log").read_text()
    assert report["HiddenDevices"] == "1:5"
    assert (workdir / "iwd/out.txt").read_text().splitlines() == [
        "null r ok", "null w ok", "zero r denied", "zero w denied",
        "PermissionError: [Errno 1] Operation not permitted: '/dev/zero'",
    ]
