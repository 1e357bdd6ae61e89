"""An interactive job's ssh sessions (execd.wire.ssh_sessions): which jobs are
interactive, the job's end (its starter waited for the sessions: here a bounded
wait for what is left), the exit the shadow is told (the last sshd's, as
condor_starter's publishJobExitAd gives it), and _CONDOR_JOB_PIDS once the
placeholder is gone."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from execd.starter.sshd_list import note_sshd_started, read_sessions, start_time
from execd.wire import ssh_sessions
from execd.wire.job_runner import JobExit
from execd.wire.ssh_sessions import JobShell, is_interactive

SIGTERMED = 15  # the placeholder's wait status: killed by the shell setup's kill
SSHD_255 = 255 << 8


def shell(tmp_path: Path, interactive: bool = True, pids: list[int] | None = None,
          cgroup: Path | None = None) -> JobShell:  # fmt: skip
    return JobShell(tmp_path, "nobody", 65534, 65534, {}, pids or [], cgroup,
                    interactive=interactive)  # fmt: skip


def test_interactive_is_the_job_ads_interactivejob_as_lookupbool_reads_it() -> None:
    assert is_interactive({"InteractiveJob": True})
    assert is_interactive({"InteractiveJob": 1})
    assert not is_interactive({"InteractiveJob": False})
    assert not is_interactive({"InteractiveJob": "true"})  # a string is no boolean
    assert not is_interactive({})


def test_the_last_sshds_end_is_reported_where_sessions_outlived_the_job(tmp_path: Path) -> None:
    done = JobExit(SIGTERMED, 3.0, outlived_by_sessions=True)
    ended = shell(tmp_path)
    ended.last_sshd_status = SSHD_255
    assert ended.reported_exit(done) == JobExit(SSHD_255, 3.0, outlived_by_sessions=True)
    # not interactive, no session outlived it, evicted meanwhile, no sshd known: the job's
    assert shell(tmp_path, interactive=False).reported_exit(done) == done
    assert ended.reported_exit(JobExit(SIGTERMED, 3.0)) == JobExit(SIGTERMED, 3.0)
    evicted = JobExit(SIGTERMED, 3.0, requested=True, outlived_by_sessions=True)
    assert ended.reported_exit(evicted) == evicted
    assert shell(tmp_path).reported_exit(done) == done


def test_the_jobs_exit_waits_for_its_sessions_a_bounded_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # (before: close() waited without limit for an interactive job's sshds, so a starter
    # that ended without killing the slice, or an sshd in D state, hung the
    # conversation: job_exit never sent). Its starter waited for them already; with or
    # without the sshd's cgroup.
    killed: list[int] = []
    monkeypatch.setattr(ssh_sessions, "kill_session", killed.append)
    monkeypatch.setattr(ssh_sessions, "REAP_WAIT_S", 0.01)

    async def scenario() -> None:
        for cgroup in (tmp_path / "slot1_1.slice" / "sshd", None):
            job = shell(tmp_path, cgroup=cgroup)
            never = asyncio.Event()
            job.sshds[2**22 + 7] = asyncio.create_task(never.wait())  # never reaped
            await asyncio.wait_for(job.close(), 5)
            assert killed.pop() == 2**22 + 7  # what is left is killed, as for any job
            job.sshds.pop(2**22 + 7).cancel()

    asyncio.run(scenario())


def test_job_pids_are_those_still_in_the_jobs_leaf(tmp_path: Path) -> None:
    leaf = tmp_path / "slot1_1.slice" / "job"
    leaf.mkdir(parents=True)
    (leaf / "cgroup.procs").write_text("123\n")
    sessions = shell(tmp_path, pids=[123], cgroup=tmp_path / "slot1_1.slice" / "sshd")
    assert sessions.live_pids() == [123]
    (leaf / "cgroup.procs").write_text("")  # the placeholder was killed
    assert sessions.live_pids() == []
    assert shell(tmp_path, pids=[123]).live_pids() == [123]  # no cgroup: as given


def test_an_interactive_jobs_sshds_are_listed_for_its_starter(tmp_path: Path) -> None:
    listed, sshd = tmp_path / "ssh_sessions", os.getpid()  # (a process that runs)
    job = JobShell(tmp_path, "nobody", 65534, 65534, {}, [], None, interactive=True,
                   sshds_file=listed)  # fmt: skip
    job.sshd_started(sshd)
    assert read_sessions(listed) == [(sshd, start_time(sshd))]
    job.sshd_reaped(sshd, None)
    assert read_sessions(listed) == []
    normal = JobShell(tmp_path, "nobody", 65534, 65534, {}, [], None,
                      sshds_file=tmp_path / "normal")  # fmt: skip
    normal.sshd_started(sshd)  # a normal job's sessions end with it: no list
    assert not (tmp_path / "normal").exists()


def test_sshds_an_earlier_image_listed_are_waited_for_and_reaped_after_a_restart(
        tmp_path: Path) -> None:  # fmt: skip
    # (before: the new image never waited for them: their exit was unknown, the
    # placeholder's SIGTERM was reported, and each ended one stayed a zombie)
    listed = tmp_path / "ssh_sessions"
    # children of this process, as the earlier image's sshds are the daemon's
    running, ended = (os.posix_spawn("/bin/sleep", ["sleep", "600"], {}) for _ in range(2))
    for sshd in (running, ended):
        note_sshd_started(listed, sshd)
    os.kill(ended, signal.SIGKILL)  # it ended during the exec: a zombie when looked at
    os.waitid(os.P_PID, ended, os.WEXITED | os.WNOWAIT)
    job = JobShell(tmp_path, "nobody", 65534, 65534, {}, [], None, interactive=True,
                   sshds_file=listed)  # fmt: skip

    async def scenario() -> None:
        job.adopt_listed()
        assert sorted(job.sshds) == sorted([running, ended])
        await asyncio.wait_for(job.sshds[ended], 5)
        assert job.last_sshd_status == signal.SIGKILL
        assert read_sessions(listed) == [(running, start_time(running))]
        os.kill(running, signal.SIGHUP)
        await asyncio.wait_for(job.sshds[running], 5)

    asyncio.run(scenario())
    assert job.sshds == {} and read_sessions(listed) == []
    assert job.reported_exit(JobExit(SIGTERMED, 3.0, outlived_by_sessions=True)) == \
        JobExit(signal.SIGHUP, 3.0, outlived_by_sessions=True)  # the last one's  # fmt: skip
    for sshd in (running, ended):  # reaped here: no zombie left
        assert not Path(f"/proc/{sshd}").exists()


def test_the_last_sshds_exit_outlives_a_restart_in_place(tmp_path: Path) -> None:
    # (before: the status lived in the earlier image's memory only: a restart after the
    # last sshd's end and before the job's end was sent reported the placeholder's)
    listed = tmp_path / "ssh_sessions"
    sshd = os.posix_spawn("/bin/sleep", ["sleep", "600"], {})
    earlier = JobShell(tmp_path, "nobody", 65534, 65534, {}, [], None, interactive=True,
                       sshds_file=listed)  # fmt: skip
    earlier.sshd_started(sshd)
    os.kill(sshd, signal.SIGKILL)
    _pid, status = os.waitpid(sshd, 0)
    earlier.sshd_reaped(sshd, status)
    later = JobShell(tmp_path, "nobody", 65534, 65534, {}, [], None, interactive=True,
                     sshds_file=listed)  # fmt: skip

    async def resume() -> None:
        later.adopt_listed()

    asyncio.run(resume())
    assert later.sshds == {}  # nothing left to wait for
    assert later.reported_exit(JobExit(SIGTERMED, 3.0, outlived_by_sessions=True)) == \
        JobExit(signal.SIGKILL, 3.0, outlived_by_sessions=True)  # fmt: skip


def test_a_listed_sshd_that_is_not_the_daemons_child_is_not_adopted(tmp_path: Path) -> None:
    # (after a kill -9 the earlier image's sshds belong to init: a pidfd would not keep
    # their pid from being reused, and end() would signal it; the slice's kill ends them)
    listed = tmp_path / "ssh_sessions"
    note_sshd_started(listed, os.getppid())  # runs, and is no child of this process
    job = JobShell(tmp_path, "nobody", 65534, 65534, {}, [], None, interactive=True,
                   sshds_file=listed)  # fmt: skip

    async def resume() -> None:
        job.adopt_listed()

    asyncio.run(resume())
    assert job.sshds == {}


def test_a_session_that_finds_the_starter_deciding_is_not_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # The starter made `.finished`, then saw another start under way and removed it
    # again: a START_SSHD that saw `.finished` in between asks again and goes on.
    # (before: it was refused "the job is finished" while the job went on)
    listed = tmp_path / "ssh_sessions"
    finished = tmp_path / "ssh_sessions.finished"
    monkeypatch.setattr(ssh_sessions, "FINISHED_RECHECK_S", 0.0)
    job = JobShell(tmp_path, "nobody", 65534, 65534, {}, [], None, interactive=True,
                   sshds_file=listed)  # fmt: skip
    real = ssh_sessions.reserve_start

    def deciding(path: Path) -> Path | None:
        mark = real(path)
        finished.unlink(missing_ok=True)  # the starter waits on after all
        return mark

    finished.touch()
    monkeypatch.setattr(ssh_sessions, "reserve_start", deciding)
    release = asyncio.run(job.reserve_sshd())
    assert release is not None
    release()
    finished.touch()  # a starter that has stopped: refused, after the second look too
    monkeypatch.setattr(ssh_sessions, "reserve_start", real)
    assert asyncio.run(job.reserve_sshd()) is None
    assert not list(tmp_path.glob("ssh_sessions.starting.*"))
