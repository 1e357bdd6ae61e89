"""An interactive job's starter (StarterSpec.wait_for_ssh_sessions): the job's end
waits for the sshds its conversation listed (execd.starter.sshd_list), as
condor_starter waits for its SSHDProcs, not for what they left in the slice's sshd
leaf (finish() kills that with the job); a vacate or removal ends the wait at once;
once it has ended no new sshd starts (its START_SSHD is refused).
The sshds and what they leave are real processes; the cgroup tree is the fake."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_cgroupfs import RecordingCgroupFS

from execd.cgroups.discovery import Hierarchy
from execd.cgroups.tree import CgroupTree
from execd.starter import run, sshd_list
from execd.starter.run import Starter
from execd.starter.spec import StarterSpec
from execd.starter.sshd_list import (
    STARTING_STALE_S,
    note_sshd_reaped,
    note_sshd_started,
    read_sessions,
    reserve_start,
)

MOUNT = Path("/sys/fs/cgroup")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Real processes standing for the sshds and what they left; all ended after."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def sleeper(procs: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "600"])
    procs.append(proc)
    return proc


def exited_starter(tmp_path: Path, in_leaf: list[int], interactive: bool = True,
                   **spec: object) -> tuple[Starter, RecordingCgroupFS]:  # fmt: skip
    """A starter whose job has exited (SIGTERM, from the first session's shell setup)
    while `in_leaf` run in the slice's sshd leaf."""
    fs = RecordingCgroupFS()
    fs.add_cgroup(MOUNT)
    CgroupTree(fs, Hierarchy(MOUNT, frozenset()), "htcondor").setup()
    starter = Starter(StarterSpec(
        job_id="9.0", slot_name="slot1_1", cmd="/bin/sh", args=[], env={}, owner="nobody",
        execute_dir=str(tmp_path), report_path=str(tmp_path / "report.json"),
        cgroup_mount=str(MOUNT), base_cgroup="htcondor", wait_for_ssh_sessions=interactive,
        ssh_sessions_file=str(tmp_path / "ssh_sessions"), **spec), fs)  # type: ignore[arg-type]  # fmt: skip
    starter.cgroup.create()
    fs.mkdir(starter.cgroup.sshd)
    fs.files[starter.cgroup.sshd / "cgroup.procs"] = "".join(f"{pid}\n" for pid in in_leaf)
    starter.status = signal.SIGTERM
    return starter, fs


def test_the_job_ends_with_its_last_sshd_not_with_what_it_left(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:  # fmt: skip
    # (before: the starter waited while the leaf held anything: `setsid sleep 600 &`
    # from a session kept the job running after the last logout)
    sshd, left = sleeper(procs), sleeper(procs)
    listed = tmp_path / "ssh_sessions"
    note_sshd_started(listed, sshd.pid)
    starter, _fs = exited_starter(tmp_path, [sshd.pid, left.pid])
    assert starter.sessions_open()
    assert starter.report["WaitedForSshSessions"] is True
    sshd.kill()
    sshd.wait()  # the daemon reaped it ...
    note_sshd_reaped(listed, sshd.pid)  # ... and said so; what it left still runs
    assert read_sessions(listed) == []
    assert not starter.sessions_open()


def test_an_sshd_listed_but_ended_or_reused_does_not_count(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:  # fmt: skip
    listed = tmp_path / "ssh_sessions"
    ended = subprocess.Popen(["true"])
    procs.append(ended)
    os.waitid(os.P_PID, ended.pid, os.WEXITED | os.WNOWAIT)  # a zombie: not yet reaped
    listed.write_text(f"{ended.pid} 1\n")
    note_sshd_started(listed, ended.pid)  # (a zombie is not listed either)
    assert read_sessions(listed) == []
    other = sleeper(procs)
    note_sshd_started(listed, other.pid)
    (_pid, start), = read_sessions(listed)
    listed.write_text(f"{ended.pid} {start}\n{other.pid} {start + 1}\n")  # a reused pid
    starter, _fs = exited_starter(tmp_path, [other.pid])
    assert not starter.sessions_open()
    assert "WaitedForSshSessions" not in starter.report


def test_a_start_under_way_keeps_the_wait_and_one_after_its_end_is_refused(
        tmp_path: Path) -> None:  # fmt: skip
    # (before: a START_SSHD accepted between the starter's last look and the slice's
    # kill started an sshd that the kill ended at once; condor_starter refuses it)
    listed = tmp_path / "ssh_sessions"
    starter, _fs = exited_starter(tmp_path, [])
    starting = reserve_start(listed)  # the conversation answers a START_SSHD
    assert starting is not None
    assert starter.sessions_open()  # its sshd is coming
    assert "WaitedForSshSessions" not in starter.report  # (none outlived the job yet)
    starting.unlink()  # not started after all
    assert not starter.sessions_open()  # the last look: no sshd, none coming
    assert reserve_start(listed) is None  # the job is finished: refused
    assert not list(tmp_path.glob("ssh_sessions.starting.*"))


def test_a_start_left_by_a_daemon_that_died_is_not_waited_for(tmp_path: Path) -> None:
    listed = tmp_path / "ssh_sessions"
    starter, _fs = exited_starter(tmp_path, [])
    starting = reserve_start(listed)
    assert starting is not None
    stale = time.time() - STARTING_STALE_S - 1
    os.utime(starting, (stale, stale))
    assert not starter.sessions_open()
    # nor one dated an hour ahead (made before the clock was set back)
    (tmp_path / "ssh_sessions.finished").unlink()
    ahead = time.time() + 3600
    os.utime(starting, (ahead, ahead))
    assert not starter.sessions_open()


def test_a_new_start_is_waited_for_beside_an_earlier_images_stale_mark(tmp_path: Path) -> None:
    # (before: marks were named .starting.N, N counted from 1 again in each image, and
    # a name an earlier image left behind kept its old time: the new start, taken for
    # stale, was not waited for)
    listed = tmp_path / "ssh_sessions"
    starter, _fs = exited_starter(tmp_path, [])
    stale = time.time() - STARTING_STALE_S - 1
    for left in (reserve_start(listed), tmp_path / "ssh_sessions.starting.1"):
        assert left is not None
        left.touch()
        os.utime(left, (stale, stale))
    assert reserve_start(listed) is not None
    assert starter.sessions_open()


def test_a_start_that_ends_between_the_starters_two_looks_is_still_seen(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # The conversation reserves its start after the starter's first look (its two reads,
    # the list and the marks) and before `.finished`; right after the second look's
    # first read it lists its sshd and releases the mark. (before: the second look read
    # the list first, then the marks, saw neither, and the slice's kill ended the
    # session just answered)
    listed, sshd = tmp_path / "ssh_sessions", sleeper(procs)
    starter, _fs = exited_starter(tmp_path, [])
    reads: list[str] = []
    mark: list[Path] = []

    def counted(name: str, read: Callable[[Path], Any]) -> Callable[[Path], Any]:
        def wrapper(path: Path) -> Any:
            seen = read(path)
            reads.append(name)
            if len(reads) == 2:  # the first look saw nothing: the conversation reserves
                reserved = reserve_start(listed)
                assert reserved is not None
                mark.append(reserved)
            elif len(reads) == 3:  # the second look's first read: the start ends
                note_sshd_started(listed, sshd.pid)
                mark.pop().unlink()
            return seen
        return wrapper

    monkeypatch.setattr(sshd_list, "_starting", counted("marks", sshd_list._starting))
    monkeypatch.setattr(sshd_list, "sshds_running", counted("list", sshd_list.sshds_running))
    assert starter.sessions_open(), reads
    assert len(reads) == 4 and not mark  # both looks made, the start ended between
    assert not (tmp_path / "ssh_sessions.finished").exists()


def test_a_finished_that_cannot_be_made_still_looks_again(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # (before: any error making `.finished`, here ELOOP, ended the wait at once, without
    # the second look: a start under way was killed with the slice)
    listed = tmp_path / "ssh_sessions"
    (tmp_path / "ssh_sessions.finished").symlink_to(tmp_path / "nowhere")
    starter, _fs = exited_starter(tmp_path, [])
    mark: list[Path | None] = []
    first_look = sshd_list._starting

    def starting(path: Path) -> bool:
        seen = first_look(path)
        if not mark:  # after the first look: a start is reserved
            mark.append(reserve_start(listed))
        return seen

    monkeypatch.setattr(sshd_list, "_starting", starting)
    assert starter.sessions_open()
    assert mark[0] is not None and mark[0].exists()


def test_a_kill_that_ends_the_wait_refuses_later_sessions(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:  # fmt: skip
    # (before: a vacate ended the wait without `.finished`: a START_SSHD after it was
    # answered, and its sshd killed with the slice or run on; condor_starter refuses)
    sshd = sleeper(procs)
    listed = tmp_path / "ssh_sessions"
    note_sshd_started(listed, sshd.pid)
    starter, _fs = exited_starter(tmp_path, [sshd.pid], vacate_seconds=600.0)
    assert starter.sessions_open()
    starter.exit_reason = "soft_killed"  # what a vacate's soft kill sets
    assert not starter.sessions_open()
    assert reserve_start(listed) is None


def test_a_kill_lets_a_start_under_way_finish_before_the_slice_is_killed(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # (before: a start answered just before the kill's `.finished` had its sshd spawned
    # while finish() killed the slice: into a slice being removed)
    listed, sshd = tmp_path / "ssh_sessions", sleeper(procs)
    starter, _fs = exited_starter(tmp_path, [], vacate_seconds=600.0)
    starting = reserve_start(listed)
    assert starting is not None
    waited: list[float] = []

    def sleep(seconds: float) -> None:  # the start ends while the starter waits
        waited.append(seconds)
        note_sshd_started(listed, sshd.pid)
        starting.unlink(missing_ok=True)

    monkeypatch.setattr(sshd_list.time, "sleep", sleep)
    starter.exit_reason = "soft_killed"
    assert not starter.sessions_open()  # the kill ends the wait ...
    assert waited and not starting.exists()  # ... once the start under way has ended
    assert (tmp_path / "ssh_sessions.finished").exists()


def test_a_normal_jobs_end_does_not_wait_for_sessions(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:  # fmt: skip
    sshd = sleeper(procs)
    note_sshd_started(tmp_path / "ssh_sessions", sshd.pid)
    starter, _fs = exited_starter(tmp_path, [sshd.pid], interactive=False)
    assert not starter.sessions_open()
    assert "WaitedForSshSessions" not in starter.report


BYSTANDER = """
import signal, sys
signal.signal(signal.SIGTERM, lambda *_: open(sys.argv[1], "a").write("TERM\\n"))
signal.signal(signal.SIGRTMIN, lambda *_: sys.exit(0))
print("ready", flush=True)
while True:
    signal.pause()
"""


def test_an_eviction_while_only_sessions_are_left_ends_them_at_once(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:  # fmt: skip
    sshd = sleeper(procs)
    note_sshd_started(tmp_path / "ssh_sessions", sshd.pid)
    starter, fs = exited_starter(tmp_path, [sshd.pid], vacate_seconds=600.0)
    assert starter.sessions_open()
    said = tmp_path / "bystander"
    bystander = subprocess.Popen([sys.executable, "-c", BYSTANDER, str(said)],
                                 stdout=subprocess.PIPE)  # fmt: skip
    procs.append(bystander)
    assert bystander.stdout is not None and bystander.stdout.readline() == b"ready\n"
    starter.pid = bystander.pid  # what the job's reaped pid is now
    starter.soft_kill()
    # A SIGTERM sent would be pending before this signal, and delivered first.
    os.kill(bystander.pid, signal.SIGRTMIN)
    assert bystander.wait(10) == 0
    assert not said.exists(), "a reaped pid is never signalled"
    assert not starter.sessions_open()  # no wait for the vacate's hard kill (600 s)
    assert starter.exit_reason == "soft_killed"  # graceful: the sandbox is spooled
    starter.started = 0.0
    starter.scratch = str(tmp_path / "scratch")
    os.mkdir(starter.scratch)
    starter.finish()
    assert sshd.pid in fs.killed  # the slice's kill ends the sessions
    assert starter.report["ExitReason"] == "soft_killed"


def test_a_vacate_while_the_job_runs_ends_its_sessions_with_it(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:  # fmt: skip
    # (before: the job exited within its grace, its sessions kept it until the hard
    # kill 600 s later, which made the vacate ungraceful: hard_killed)
    sshd, job = sleeper(procs), sleeper(procs)
    note_sshd_started(tmp_path / "ssh_sessions", sshd.pid)
    starter, _fs = exited_starter(tmp_path, [sshd.pid], vacate_seconds=600.0)
    starter.status, starter.pid = None, job.pid
    starter.soft_kill()
    job.wait()
    starter.status = job.returncode
    assert not starter.sessions_open()
    assert starter.exit_reason == "soft_killed"


def test_watch_waits_for_the_sshds_then_the_exit_is_announced(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    sshd, left = sleeper(procs), sleeper(procs)
    note_sshd_started(tmp_path / "ssh_sessions", sshd.pid)
    fifo = tmp_path / "job_exited"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    starter, _fs = exited_starter(tmp_path, [sshd.pid, left.pid], polling_interval=0.01,
                                  exit_fifo=str(fifo))  # fmt: skip
    starter.status = None
    # The job: the placeholder the first session's shell setup kills.
    starter.pid = os.posix_spawn("/bin/sh", ["sh", "-c", "kill -TERM $$"], dict(os.environ))
    starter.started = 0.0
    starter.scratch = str(tmp_path / "scratch")
    os.mkdir(starter.scratch)
    monkeypatch.setattr(run, "SESSIONS_POLL_S", 0.01)
    seen: list[str] = []
    real = run.sshds_open

    def polled(*args: object) -> bool:
        assert os.read(reader, 64) == b""  # nothing announced while a session runs
        seen.append("poll")
        if len(seen) == 3:  # the last session ends
            sshd.kill()
            sshd.wait()
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(run, "sshds_open", polled)
    try:
        starter.watch()
        starter.announce_exit()
        seen.append(os.read(reader, 64).decode())
    finally:
        os.close(reader)
    starter.finish()
    assert seen == ["poll", "poll", "poll", "job_exited\n"]
    assert starter.report["WaitedForSshSessions"] is True
    assert starter.report["ExitSignal"] == signal.SIGTERM
    assert starter.report["ExitReason"] == "exited"
