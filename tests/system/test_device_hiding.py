"""STARTER_HIDE_GPU_DEVICES' mechanism on the real kernel: a BPF device program on the
job's cgroup (this machine's controller-less cgroup v2 is enough). No GPU here, so the
devices denied are /dev/zero (1:5) and /dev/full (1:7), mode 0666 and open to anyone
without the program; the job runs as nobody in its real cgroup, as a GPU job would."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from starter_helpers import finished, start

from execd.cgroups import devices
from execd.cgroups.tree import CgroupTree
from execd.errors import CgroupError
from execd.starter.spec import StarterSpec

# Opens each device for reading and for writing, in the job and in a child it forks.
PROBE = (
    "import errno, os\n"
    "def probe(who):\n"
    "    for path in ('/dev/null', '/dev/zero', '/dev/full'):\n"
    "        for mode, flag in (('r', os.O_RDONLY), ('w', os.O_WRONLY)):\n"
    "            try:\n"
    "                os.close(os.open(path, flag))\n"
    "                print(who, path, mode, 'ok', flush=True)\n"
    "            except OSError as e:\n"
    "                print(who, path, mode, errno.errorcode[e.errno], flush=True)\n"
    "probe('job')\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    probe('child')\n"
    "    os._exit(0)\n"
    "os.waitpid(pid, 0)\n"
)
ZERO, FULL = [1, 5], [1, 7]


def probed(workdir: Path) -> dict[tuple[str, str, str], str]:
    lines = (workdir / "iwd/out.txt").read_text().split("\n")
    return {(w, p, m): r for w, p, m, r in (line.split() for line in lines if line)}


def run_probe(make_spec: Callable[..., StarterSpec], workdir: Path,
              **kw: object) -> tuple[dict[str, object], dict[tuple[str, str, str], str]]:
    spec = make_spec("", cmd="/usr/bin/python3", args=["-c", PROBE], **kw)
    report = finished(start(spec, workdir), workdir)
    assert report["ExitCode"] == 0, (workdir / "iwd/err.txt").read_text()
    return report, probed(workdir)


def test_hidden_devices_fail_with_eperm_for_the_job_and_its_children(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    report, seen = run_probe(make_spec, workdir, hide_devices=[ZERO, FULL])
    for who in ("job", "child"):
        for mode in ("r", "w"):
            assert seen[(who, "/dev/null", mode)] == "ok"
            assert seen[(who, "/dev/zero", mode)] == "EPERM"  # whatever its mode (0666)
            assert seen[(who, "/dev/full", mode)] == "EPERM"
    assert report["JobUser"] == "nobody"
    assert report["HiddenDevices"] == "1:5,1:7"
    assert "GpuHidingProblem" not in report
    assert "gpu_devices_hidden job=1.0 devices=1:5,1:7" in (workdir / "starter.log").read_text()


def test_without_devices_to_hide_the_job_opens_them_all(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    report, seen = run_probe(make_spec, workdir)
    assert set(seen.values()) == {"ok"}
    assert "HiddenDevices" not in report and "GpuHidingProblem" not in report


def test_the_program_composes_with_one_attached_above(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    """A program above the job's cgroup (as systemd attaches, BPF_F_ALLOW_MULTI) still
    runs: the job is denied what either program denies."""
    devices.deny_devices(tree.base, [(1, 7)])
    report, seen = run_probe(make_spec, workdir, hide_devices=[ZERO])
    assert seen[("job", "/dev/zero", "r")] == seen[("child", "/dev/full", "w")] == "EPERM"
    assert seen[("job", "/dev/null", "w")] == "ok"
    assert report["HiddenDevices"] == "1:5"


def test_hiding_that_cannot_be_applied_is_reported_and_the_job_runs(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    """A program attached above without BPF_F_ALLOW_MULTI forbids any below (EPERM):
    as condor_starter, the job runs unhidden; unlike it, the report says so."""
    devices.deny_devices(tree.base, [(1, 7)], allow_multi=False)
    report, seen = run_probe(make_spec, workdir, hide_devices=[ZERO],
                             gpu_hiding_problem="no device file is known for GPU-bb22")
    assert seen[("job", "/dev/zero", "r")] == "ok"  # not hidden: the report must say so
    assert seen[("job", "/dev/full", "r")] == "EPERM"  # the program above still applies
    problem = str(report["GpuHidingProblem"])
    assert problem.startswith("no device file is known for GPU-bb22; devices 1:5 are not "
                              "hidden: cannot attach the BPF device program to ")
    assert problem.endswith("Operation not permitted")
    assert "HiddenDevices" not in report
    log = (workdir / "starter.log").read_text()
    assert "gpu_devices_not_hidden job=1.0 reason='no device file" in log


def test_a_leftover_slice_with_an_old_program_is_replaced(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    """An empty slice a killed starter left behind, with its job's program, does not
    deny the next job what that one was denied."""
    left = tree.job("slot1_1")
    left.create()
    devices.deny_devices(left.slice, [(1, 5)])
    _report, seen = run_probe(make_spec, workdir)
    assert set(seen.values()) == {"ok"}


def test_bad_device_numbers_are_refused_before_the_kernel_sees_them(tree: CgroupTree) -> None:
    with pytest.raises(CgroupError, match="out of range"):
        devices.deny_devices(tree.base, [(1, 2**32)])
