"""An interactive job's starter (StarterSpec.wait_for_ssh_sessions): the job's end
waits for the ssh sessions in its slice's sshd leaf, as condor_starter waits for its
SSHDProcs, and an eviction meanwhile ends them (the job's reaped pid is never
signalled)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fake_cgroupfs import RecordingCgroupFS

from execd.cgroups.discovery import Hierarchy
from execd.cgroups.tree import CgroupTree
from execd.starter.run import Starter
from execd.starter.spec import StarterSpec

MOUNT = Path("/sys/fs/cgroup")


def exited_starter(tmp_path: Path, interactive: bool) -> tuple[Starter, RecordingCgroupFS]:
    """A starter whose job has exited while a session runs in the slice's sshd leaf."""
    fs = RecordingCgroupFS()
    fs.add_cgroup(MOUNT)
    CgroupTree(fs, Hierarchy(MOUNT, frozenset()), "htcondor").setup()
    spec = StarterSpec(job_id="9.0", slot_name="slot1_1", cmd="/bin/sh", args=[], env={},
                       owner="nobody", execute_dir=str(tmp_path),
                       report_path=str(tmp_path / "report.json"),
                       cgroup_mount=str(MOUNT), base_cgroup="htcondor",
                       wait_for_ssh_sessions=interactive)  # fmt: skip
    starter = Starter(spec, fs)
    starter.cgroup.create()
    fs.mkdir(starter.cgroup.sshd)
    fs.files[starter.cgroup.sshd / "cgroup.procs"] = "4321\n"  # the session's sshd
    starter.status = 15  # killed by SIGTERM (the session's shell setup)
    return starter, fs


def test_an_interactive_jobs_end_waits_for_its_sessions(tmp_path: Path) -> None:
    starter, fs = exited_starter(tmp_path, interactive=True)
    assert starter.sessions_open()
    assert starter.report["WaitedForSshSessions"] is True
    fs.files[starter.cgroup.sshd / "cgroup.procs"] = ""  # the last session ended
    assert not starter.sessions_open()


def test_a_normal_jobs_end_does_not_wait_for_sessions(tmp_path: Path) -> None:
    starter, _fs = exited_starter(tmp_path, interactive=False)
    assert not starter.sessions_open()
    assert "WaitedForSshSessions" not in starter.report


def test_an_eviction_while_only_sessions_are_left_ends_them_at_once(tmp_path: Path) -> None:
    starter, fs = exited_starter(tmp_path, interactive=True)
    bystander = subprocess.Popen(["sleep", "60"])  # what the job's reaped pid is now
    try:
        starter.pid = bystander.pid
        starter.soft_kill()
        assert bystander.poll() is None, "a reaped pid is never signalled"
    finally:
        bystander.kill()
        bystander.wait()
    assert 4321 in fs.killed  # the slice's processes, the session's included
    assert starter.exit_reason == "hard_killed"
    assert starter.hard_kill_at is None
