"""The starter end to end: real jobs, real users, the real controller-less cgroup v2."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from starter_helpers import NOBODY, finished, start, status, wait_until

from execd.cgroups.tree import CgroupTree
from execd.starter.launcher import launch_starter
from execd.starter.spec import StarterSpec


def test_job_runs_as_nobody_inside_its_cgroup_with_htcondor_environment(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    script = (
        "id -u; cat /proc/self/cgroup; echo $_CONDOR_SCRATCH_DIR; echo $_CONDOR_SLOT; "
        "echo $FROM_JOB; echo gpus=$CUDA_VISIBLE_DEVICES; "
        "stat -c '%U %a' $_CONDOR_SCRATCH_DIR; grep NoNewPrivs /proc/self/status; "
        "echo oops >&2; exit 3"
    )
    # the variables the daemon computed for the slot's GPUs win over the job's own
    spec = make_spec(script, env={"FROM_JOB": "yes", "CUDA_VISIBLE_DEVICES": "all"},
                     gpus=["GPU-1"], resource_env={"CUDA_VISIBLE_DEVICES": "GPU-1"})
    handle = start(spec, workdir)
    report = finished(handle, workdir)
    out = (workdir / "iwd/out.txt").read_text().splitlines()
    leaf = "/" + str((tree.base / "slot1_1.slice/job").relative_to(tree.hierarchy.mount))
    scratch = str(workdir / "execute" / f"dir_{handle.pid}")
    assert out[0] == str(NOBODY)
    assert f"0::{leaf}" in out
    assert out[out.index(f"0::{leaf}") + 1 :] == [
        scratch,
        "slot1_1",
        "yes",
        "gpus=GPU-1",
        "nobody 700",
        "NoNewPrivs:\t1",
    ]
    assert (workdir / "iwd/err.txt").read_text() == "oops\n"
    assert report["ExitCode"] == 3
    assert report["ExitBySignal"] is False
    assert report["ExitReason"] == "exited"
    assert report["JobUser"] == "nobody"
    assert not Path(scratch).exists(), "the scratch directory is removed after the job"
    assert not (tree.base / "slot1_1.slice").exists()
    if tree.controllers:  # a pure v2 host (e.g. the GPU machine): the kernel
        assert str(report["CgroupEnforcement"]).startswith("kernel: ")
        assert "kernel: none" not in str(report["CgroupEnforcement"])
    else:  # this project's hybrid host: nothing in the kernel, memory by policy
        assert "kernel: none; policy:" in str(report["CgroupEnforcement"])


def test_a_premade_sandbox_is_given_to_the_job_user_and_left_for_its_maker(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    """A pool job's sandbox (the shadow's input already in it, made the user's as it
    arrived): the job runs there as its user, reads the input, writes its output there;
    the sandbox stays afterwards. Only the directory itself is handed over: what is in
    it is never walked and chowned (a file of root's stays root's)."""
    sandbox = workdir / "execute" / "dir_transferred"
    (sandbox / "data").mkdir(parents=True)
    (sandbox / "data" / "in.txt").write_text("input\n")
    spec = make_spec("cat data/in.txt; id -u > uid.txt; stat -c '%U %a' .",
                     sandbox=str(sandbox), iwd=str(sandbox), stdout="_condor_stdout")
    report = finished(start(spec, workdir), workdir)
    assert report["ExitReason"] == "exited" and report["ExitCode"] == 0
    assert (sandbox / "_condor_stdout").read_text() == "input\nnobody 700\n"
    assert (sandbox / "uid.txt").read_text() == f"{NOBODY}\n"
    assert (sandbox / "data" / "in.txt").stat().st_uid == 0
    assert not [p for p in (workdir / "execute").iterdir() if p != sandbox]


def test_a_root_owner_never_runs_as_root(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    handle = start(make_spec("id -u", owner="root"), workdir)
    report = finished(handle, workdir)
    assert report["JobUser"] == "nobody"
    assert (workdir / "iwd/out.txt").read_text() == f"{NOBODY}\n"


def test_missing_executable_holds_the_job(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    status_path = workdir / "status.json"
    handle = start(make_spec("", cmd="/no/such/program", status_path=str(status_path)), workdir)
    report = finished(handle, workdir)
    assert report["ExitReason"] == "spawn_failed"
    assert report["HoldReasonCode"] == 6
    assert report["HoldReasonSubCode"] == 2  # ENOENT
    assert "/no/such/program" in str(report["HoldReason"])
    # a job that never started has no status (the daemon would take it for started)
    assert not status_path.exists()


def test_an_iwd_the_job_cannot_enter_holds_it_naming_the_directory(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    missing = workdir / "no-such-iwd"
    handle = start(make_spec("exit 0", iwd=str(missing)), workdir)
    report = finished(handle, workdir)
    assert report["ExitReason"] == "spawn_failed"
    assert (report["HoldReasonCode"], report["HoldReasonSubCode"]) == (6, 2)  # ENOENT
    # HTCondor's words: the directory is at fault, not the executable
    assert report["HoldReason"] == (
        f"Failed to execute '/bin/sh': Cannot access initial working directory \"{missing}\""
    )


def test_a_job_that_dumps_core_is_reported_so_and_one_killed_is_not(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    """WCOREDUMP of the job's wait status, which the shadow's JobCoreDumped comes from
    (core_pattern "core": the file lands in the job's Iwd, which it may write)."""
    if Path("/proc/sys/kernel/core_pattern").read_text().strip() != "core":
        pytest.skip("core_pattern is not a plain file name here")
    (workdir / "iwd").mkdir(mode=0o777, exist_ok=True)
    (workdir / "iwd").chmod(0o777)
    handle = start(make_spec("ulimit -c unlimited; kill -SEGV $$"), workdir)
    report = finished(handle, workdir)
    assert (report["ExitSignal"], report.get("JobCoreDumped")) == (signal.SIGSEGV, True)
    handle = start(make_spec("ulimit -c 0; kill -SEGV $$"), workdir)
    report = finished(handle, workdir)
    assert report["ExitSignal"] == signal.SIGSEGV and "JobCoreDumped" not in report


def test_background_processes_left_by_the_job_are_killed_at_exit(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    handle = start(make_spec("nohup env -i sleep 1234 >/dev/null 2>&1 & exit 0"), workdir)
    report = finished(handle, workdir)
    assert report["ExitCode"] == 0
    assert not (tree.base / "slot1_1.slice").exists()
    assert not any(
        p.read_bytes().startswith(b"sleep\x001234") for p in Path("/proc").glob("[0-9]*/cmdline")
    )


def test_suspend_freezes_and_continue_thaws_the_whole_job(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    status_path = workdir / "status.json"
    spec = make_spec("sleep 1000 & sleep 1000 & wait", status_path=str(status_path))
    handle = start(spec, workdir)
    job = tree.job("slot1_1")
    wait_until(lambda: job.leaf.exists() and len(job.pids()) == 3, "three job processes")
    handle.suspend()
    wait_until(job.frozen, "cgroup.events frozen 1")
    wait_until(lambda: status(status_path).get("JobState") == "Suspended", "Suspended status")
    assert status(status_path)["NumProcesses"] == 3
    handle.continue_()
    wait_until(lambda: not job.frozen(), "cgroup.events frozen 0")
    wait_until(lambda: status(status_path).get("JobState") == "Running", "Running status")
    handle.hard_kill()
    report = finished(handle, workdir)
    assert report["ExitReason"] == "hard_killed"
    assert report["ExitBySignal"] is True
    assert report["ExitSignal"] == signal.SIGKILL
    assert report["NumProcesses"] == 3


def test_a_suspend_sent_as_a_cold_starter_starts_suspends_the_job_and_does_not_kill_it(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    # Sent before the starter's Python has blocked SIGUSR1: its default action would end
    # the starter. Started with it blocked, the starter takes it once the job runs.
    status_path = workdir / "status.json"
    spec = make_spec("sleep 1000", status_path=str(status_path))
    handle = launch_starter(spec, str(workdir / "spec.json"), str(workdir / "starter.log"),
                            zygote=False)
    handle.suspend()
    job = tree.job("slot1_1")
    wait_until(lambda: status(status_path).get("JobState") == "Suspended", "Suspended status")
    assert job.frozen()
    handle.continue_()
    wait_until(lambda: status(status_path).get("JobState") == "Running", "Running status")
    handle.hard_kill()
    report = finished(handle, workdir)
    assert report["ExitReason"] == "hard_killed"


def test_soft_kill_sends_killsig_to_a_suspended_job_after_thawing_it(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    script = "trap 'exit 7' USR1; touch ready; while :; do sleep 0.05; done"
    handle = start(make_spec(script, kill_sig=signal.SIGUSR1), workdir)
    job = tree.job("slot1_1")
    wait_until((workdir / "iwd/ready").exists, "the job's trap to be set")
    handle.suspend()
    wait_until(job.frozen, "cgroup.events frozen 1")
    handle.soft_kill()
    report = finished(handle, workdir)
    assert report["ExitCode"] == 7
    assert report["ExitReason"] == "soft_killed"


def test_a_job_that_ignores_sigterm_and_escapes_is_hard_killed_after_the_vacate_time(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    script = (
        "trap '' TERM; setsid sh -c 'nohup env -i sleep 1234 >/dev/null 2>&1 &'; "
        "i=0; while [ $i -lt 200 ]; do sleep 1000 & i=$((i+1)); done; wait"
    )
    handle = start(make_spec(script, vacate_seconds=0.3), workdir)
    job = tree.job("slot1_1")
    wait_until(lambda: job.leaf.exists() and len(job.pids()) >= 202, "the job's children")
    handle.soft_kill()
    report = finished(handle, workdir)
    assert report["ExitReason"] == "hard_killed"
    assert report["ExitSignal"] == signal.SIGKILL
    assert int(str(report["NumProcesses"])) >= 202
    assert not (tree.base / "slot1_1.slice").exists()


def test_memory_over_the_limit_on_a_controller_less_host_is_held_by_policy(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    script = (
        'exec python3 -c \'x = bytearray(80 * 2**20); x[::4096] = b"1" * len(x[::4096]); '
        "import time; time.sleep(100)'"
    )
    handle = start(make_spec(script, memory_mb=30, polling_interval=0.05), workdir)
    report = finished(handle, workdir)
    assert report["ExitReason"] == "held"
    assert report["HoldReasonCode"] == 34
    assert report["HoldReasonSubCode"] == 102
    assert str(report["HoldReason"]).startswith(
        "Job has gone over cgroup memory limit of 30 megabytes. Last measured usage: "
    )
    assert str(report["HoldReason"]).endswith(
        "megabytes.  Consider resubmitting with a higher request_memory."
    )
    assert int(str(report["MemoryUsage"])) >= 30  # the kernel caps it at the limit


def test_the_starter_outlives_its_parent_and_kill_family_ends_everything(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    # A throwaway parent launches the starter and dies at once, as a crashed daemon would.
    spec = make_spec("touch ready; exec sleep 1000")
    parent = (
        "import sys, json\n"
        "from execd.starter.launcher import launch_starter\n"
        "from execd.starter.spec import StarterSpec\n"
        f"spec = StarterSpec.from_dict(json.loads({json.dumps(json.dumps(spec._asdict()))}))\n"
        f"h = launch_starter(spec, {str(workdir / 'spec.json')!r}, "
        f"{str(workdir / 'starter.log')!r})\n"
        "print(h.pid)\n"
    )
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", parent],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": os.getcwd()},
    )
    starter_pid = int(out.stdout)
    wait_until((workdir / "iwd/ready").exists, "the job to start")
    assert Path(f"/proc/{starter_pid}").exists(), "the starter survived its parent"
    assert os.getsid(starter_pid) == starter_pid, "the starter leads its own session"
    job = tree.job("slot1_1")
    assert len(job.pids()) == 1
    # KILLING_TIMEOUT: the daemon (here a fresh handle) kills the starter and the job.
    from execd.starter.launcher import StarterHandle

    handle = StarterHandle(spec, None, pid=starter_pid)
    handle.kill_family()
    wait_until(
        lambda: (
            not Path(f"/proc/{starter_pid}/stat").exists()
            or Path(f"/proc/{starter_pid}/stat").read_text().split()[2] == "Z"
        ),
        "the starter to die",
    )
    assert not job.slice.exists()



def test_starters_are_forked_from_the_zygote_and_a_dead_zygote_is_replaced(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    from execd.starter.launcher import ZYGOTE

    finished(start(make_spec("exit 0"), workdir), workdir)  # starts the zygote if need be
    zygote = ZYGOTE.proc
    assert zygote is not None
    handle = start(make_spec("exit 5"), workdir)
    if handle.proc is not None:  # the zygote was still starting up: this one went cold
        assert finished(handle, workdir)["ExitCode"] == 5
        handle = start(make_spec("exit 5"), workdir)
    assert handle.proc is None, "forked by the zygote, not by us"
    assert Path(f"/proc/{handle.pid}/status").read_text().count(f"PPid:\t{zygote.pid}\n") == 1
    pid = handle.pid
    wait_until(lambda: os.getsid(pid) == pid, "the starter to lead its own session")
    assert finished(handle, workdir)["ExitCode"] == 5
    zygote.kill()
    zygote.wait()
    handle = start(make_spec("exit 6"), workdir)
    assert handle.proc is not None, "no zygote: the starter is started cold"
    assert finished(handle, workdir)["ExitCode"] == 6
    assert ZYGOTE.proc is not None and ZYGOTE.proc.pid != zygote.pid, "a new zygote is up"


def test_a_zygote_forked_starter_reports_as_itself_and_fails_setup_as_a_cold_one(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    """The zygote reads the spec and plans the job before it forks: what the starter
    reports (its pid, a setup failure, a bad spec) is still the starter's own."""
    import select

    from execd.starter.launcher import ZYGOTE

    ZYGOTE.start()  # up before the first job, as the daemon starts it
    handle = start(make_spec("exit 0"), workdir)
    assert handle.proc is None, "forked by the zygote"
    assert finished(handle, workdir)["StarterPid"] == handle.pid
    for zygote in (True, False):
        (workdir / "report.json").unlink(missing_ok=True)
        spec = make_spec("touch started", base_cgroup="no-such-base-execd")
        handle = launch_starter(spec, str(workdir / "spec.json"), str(workdir / "starter.log"),
                                zygote=zygote)  # fmt: skip
        assert (handle.proc is None) == zygote
        assert handle.wait(timeout=30) == 1
        report = handle.report()
        assert report["ExitReason"] == "starter_failed"
        assert "no-such-base-execd" in str(report["StarterError"])
        assert not (workdir / "iwd/started").exists()
    (workdir / "garbage.json").write_text("{not json")
    forked = ZYGOTE.fork_starter(str(workdir / "garbage.json"), str(workdir / "bad.log"))
    assert forked is not None and forked[1] is not None
    assert select.select([forked[1]], [], [], 30)[0], "the starter ends at once"
    os.close(forked[1])
    wait_until(lambda: "starter_bad_spec" in (workdir / "bad.log").read_text(),
               "the bad spec named in the starter's log")  # fmt: skip


def test_a_slot_whose_cgroup_still_holds_a_job_is_not_reused(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    import subprocess

    left = tree.job("slot1_1")
    left.create()
    leftover = subprocess.Popen(["sleep", "600"])
    try:
        left.add(leftover.pid)
        handle = start(make_spec("touch started"), workdir)
        handle.wait(timeout=30)
        report = handle.report()
        assert report["ExitReason"] == "starter_failed"
        assert "still holds processes of an earlier job" in str(report["StarterError"])
        assert not (workdir / "iwd/started").exists()
        assert leftover.poll() is None, "the starter does not kill what it did not start"
    finally:
        leftover.kill()
        leftover.wait()
