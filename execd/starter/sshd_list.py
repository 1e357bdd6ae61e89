"""An interactive job's ssh sessions, as its starter waits for them.

condor_starter counts each session's sshd (its SSHDProc) among its jobs and ends the
job when the last one is reaped (Starter::Reaper, allJobsDone); whatever a session
left running (nohup, setsid, tmux -d, an editor's server) is then killed with the
job. So the starter waits for the sshds themselves, not for the slice's sshd leaf to
empty: the job's conversation, which starts and reaps them, keeps a file in the
starter's directory (root's, in SPOOL; it outlives a restart in place), one line per
sshd it started, `pid start-time` (/proc/<pid>/stat's starttime, so that a reused pid
is never taken for an sshd). A listed sshd counts while that process lives in the
slice's sshd leaf. Light: the starter imports it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execd.errors import CgroupError

if TYPE_CHECKING:
    from execd.cgroups.fs import CgroupFS
    from execd.starter.spec import StarterSpec

SSH_SESSIONS_FILE = "ssh_sessions"  # its name in the starter's directory
# How often an interactive job that has exited looks whether its sshds have ended
# (they are the daemon's children: their end sends the starter nothing).
SESSIONS_POLL_S = 0.25

Session = tuple[int, int]  # (pid, start time in clock ticks since boot)


def start_time(pid: int) -> int | None:
    """The process's start time (/proc/<pid>/stat field 22); None: no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    try:  # the fields after the command's ")" start at field 3
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def read_sessions(path: str | Path) -> list[Session]:
    """The sshds listed (none: no file, or a line that is not `pid start`)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    sessions = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            sessions.append((int(fields[0]), int(fields[1])))
    return sessions


def _write(path: Path, sessions: list[Session]) -> None:
    part = path.with_name(path.name + ".part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(f"{pid} {start}\n" for pid, start in sessions)
    os.replace(part, path)  # the starter reads either list, never half of one


def _running(sessions: list[Session]) -> list[Session]:
    return [(pid, start) for pid, start in sessions if start_time(pid) == start]


def note_sshd_started(path: Path, pid: int) -> None:
    """List a new sshd (with those still running, an earlier image's included)."""
    start = start_time(pid)
    listed = [s for s in _running(read_sessions(path)) if s[0] != pid]
    _write(path, listed + ([(pid, start)] if start is not None else []))


def note_sshd_reaped(path: Path, pid: int) -> None:
    """An sshd was reaped: it no longer counts."""
    _write(path, [s for s in _running(read_sessions(path)) if s[0] != pid])


def sshds_running(path: str | Path, leaf_procs: str) -> list[int]:
    """The listed sshds that still run in the sshd leaf (`leaf_procs`: its cgroup.procs)."""
    in_leaf = {int(pid) for pid in leaf_procs.split() if pid.isdigit()}
    return [pid for pid, start in read_sessions(path)
            if pid in in_leaf and start_time(pid) == start]  # fmt: skip


def sshds_open(spec: StarterSpec, fs: CgroupFS, leaf: Path, report: dict[str, Any]) -> bool:
    """Whether an interactive job's starter still waits: a listed sshd runs in `leaf`
    (the first time, its report says WaitedForSshSessions and its log says so)."""
    if not spec.wait_for_ssh_sessions or spec.ssh_sessions_file is None:
        return False
    try:
        procs = fs.read(leaf / "cgroup.procs")
    except CgroupError:  # the leaf was never made: no session ever started
        return False
    if not sshds_running(spec.ssh_sessions_file, procs):
        return False
    if "WaitedForSshSessions" not in report:
        report["WaitedForSshSessions"] = True
        sys.stderr.write(f"job_waits_for_ssh_sessions job={spec.job_id}\n")  # (run.event)
        sys.stderr.flush()
    return True
