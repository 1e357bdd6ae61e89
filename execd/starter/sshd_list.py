"""An interactive job's ssh sessions, as its starter waits for them.

condor_starter counts each session's sshd (its SSHDProc) among its jobs and ends the
job when the last one is reaped (Starter::Reaper, allJobsDone); whatever a session
left running (nohup, setsid, tmux -d, an editor's server) is then killed with the
job. So the starter waits for the sshds themselves, not for the slice's sshd leaf to
empty: the job's conversation, which starts and reaps them, keeps a file in the
starter's directory (root's, in SPOOL; it outlives a restart in place), one line per
sshd it started, `pid start-time` (/proc/<pid>/stat's starttime, so that a reused pid
is never taken for an sshd). A listed sshd counts while that process runs (a zombie,
one the daemon has not reaped yet, does not: it has ended).

A START_SSHD is refused once the starter has stopped waiting (condor_starter: "the
job is finished"), without a lock: the conversation makes a `.starting.*` file (a
new name each time) before it answers the client, lists the sshd, then removes the
mark; the starter makes `.finished` when no listed sshd runs and none is coming,
then looks again, at the marks first and the list second. One of the two always
sees the other's file: a mark made before `.finished` is seen by the second look
unless it has gone, and then the sshd it stood for is listed already; a mark made
after it sees `.finished` and is refused (the conversation asks once more a moment
later: a starter still deciding may remove `.finished` again, seeing another start).
A kill requested ends the wait and makes `.finished` too (stop_waiting), and lets the
starts under way finish first (wait_for_starts). The exit of the sshd reaped last is
kept beside the list (`.last`), for the next image. Light: the starter imports it.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from execd.starter.spec import StarterSpec

SSH_SESSIONS_FILE = "ssh_sessions"  # its name in the starter's directory
# How often an interactive job that has exited looks whether its sshds have ended
# (they are the daemon's children: their end sends the starter nothing).
SESSIONS_POLL_S = 0.25
# A start reserved longer ago than this was left by a daemon that died meanwhile (a
# start takes at most the client's answer and the sshd's spawn); one this far in the
# future was made before the clock was set back, and is not waited for either.
STARTING_STALE_S = 60.0
# Files made here are never opened through a link (SPOOL is root's; this is hardening).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_MARKS = itertools.count(1)  # with the pid and the clock: each mark's name is new

# How often a kill's end of the wait looks whether the starts under way are done, and
# for how long at most (a start takes the client's answer and the sshd's spawn).
START_POLL_S = 0.02
START_WAIT_S = 5.0

Session = tuple[int, int]  # (pid, start time in clock ticks since boot)


def start_time(pid: int) -> int | None:
    """The process's start time (/proc/<pid>/stat field 22); None: no such process, or
    a zombie (it has ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # from field 3, the state
    if len(fields) < 20 or fields[0] in (b"Z", b"X") or not fields[19].isdigit():
        return None
    return int(fields[19])


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


def _replace(path: Path, text: str) -> None:
    """`path` replaced whole: a reader gets the old text or the new, never half."""
    part = path.with_name(path.name + ".part")
    with os.fdopen(os.open(part, _CREATE | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)
    os.replace(part, path)


def _write(path: Path, sessions: list[Session]) -> None:
    _replace(path, "".join(f"{pid} {start}\n" for pid, start in sessions))


def _running(sessions: list[Session]) -> list[Session]:
    return [(pid, start) for pid, start in sessions if start_time(pid) == start]


def note_sshd_started(path: Path, pid: int) -> None:
    """List a new sshd (with those still running, an earlier image's included)."""
    start = start_time(pid)
    listed = [s for s in _running(read_sessions(path)) if s[0] != pid]
    _write(path, listed + ([(pid, start)] if start is not None else []))


def note_sshd_reaped(path: Path, pid: int, status: int | None = None) -> None:
    """An sshd was reaped: it no longer counts. Its wait status (if known) is kept
    beside the list first (last_status): the exit reported if it is the last, also
    by a next image of the daemon (a restart in place before the job's end is sent)."""
    if status is not None:
        _replace(Path(f"{path}.last"), f"{status}\n")
    _write(path, [s for s in _running(read_sessions(path)) if s[0] != pid])


def last_status(path: Path) -> int | None:
    """The wait status of the sshd reaped last (note_sshd_reaped); None: none known."""
    try:
        text = Path(f"{path}.last").read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def sshds_running(path: str | Path) -> list[int]:
    """The listed sshds that still run."""
    return [pid for pid, _start in _running(read_sessions(path))]


def reserve_start(path: Path) -> Path | None:
    """Before a new sshd's client is answered: what tells the starter one is coming
    (release it once the sshd is listed, or not started); None: the starter has
    stopped waiting, the job is finished (refuse). The mark's name is new (O_EXCL):
    its time is that of this start, never an earlier image's leftover's."""
    mark = path.with_name(f"{path.name}.starting.{os.getpid()}.{time.time_ns()}."
                          f"{next(_MARKS)}")  # fmt: skip
    os.close(os.open(mark, _CREATE | os.O_EXCL, 0o600))
    if os.path.exists(f"{path}.finished"):
        os.unlink(mark)
        return None
    return mark


def _starting(path: Path) -> bool:
    """A start reserved (reserve_start) and not stale (its daemon may have died)."""
    prefix, now = f"{path.name}.starting.", time.time()
    try:
        names = [n for n in os.listdir(path.parent) if n.startswith(prefix)]
    except OSError:
        return False
    for name in names:
        try:
            if abs(now - os.stat(path.parent / name).st_mtime) < STARTING_STALE_S:
                return True
        except OSError:
            continue
    return False


def stop_waiting(spec: StarterSpec) -> bool:
    """The starter waits for no session any more: from now on a START_SSHD is refused
    (reserve_start). False: no directory to say it in (no session ever started). A
    `.finished` that cannot be made otherwise is logged, and the caller still looks
    again (a start under way is waited for; a later one is answered, and its sshd
    ends with the slice)."""
    if spec.ssh_sessions_file is None:
        return False
    try:
        os.close(os.open(f"{spec.ssh_sessions_file}.finished", _CREATE, 0o600))
    except FileNotFoundError:
        return False
    except OSError as exc:
        sys.stderr.write(f"ssh_sessions_not_finished job={spec.job_id} "
                         f"error={exc.strerror or exc}\n")  # (run.event)  # fmt: skip
        sys.stderr.flush()
    return True


def wait_for_starts(spec: StarterSpec, timeout_s: float) -> None:
    """After stop_waiting on a kill: a start under way (answered before `.finished`)
    has its sshd put in the slice before the slice is killed, not after (a bounded
    wait: a dead daemon's mark is not waited for long)."""
    if spec.ssh_sessions_file is None:
        return
    path, deadline = Path(spec.ssh_sessions_file), time.monotonic() + timeout_s
    while _starting(path) and time.monotonic() < deadline:
        time.sleep(START_POLL_S)


def sshds_open(spec: StarterSpec, report: dict[str, Any]) -> bool:
    """Whether an interactive job's starter still waits: a listed sshd runs (the first
    time, its report says WaitedForSshSessions and its log says so), or one is being
    started. Once it stops, no new sshd starts (reserve_start)."""
    if not spec.wait_for_ssh_sessions or spec.ssh_sessions_file is None:
        return False
    path = Path(spec.ssh_sessions_file)
    running = bool(sshds_running(path))
    if not running and not _starting(path):
        if not stop_waiting(spec):
            return False
        # Look again, at the marks before the list: a start that ends between the
        # two looks is listed by the time its mark goes (see above).
        starting = _starting(path)
        running = bool(sshds_running(path))
        if not running and not starting:
            return False
        Path(f"{path}.finished").unlink(missing_ok=True)
    if running and "WaitedForSshSessions" not in report:
        report["WaitedForSshSessions"] = True
        sys.stderr.write(f"job_waits_for_ssh_sessions job={spec.job_id}\n")  # (run.event)
        sys.stderr.flush()
    return True
