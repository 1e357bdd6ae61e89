"""A running job's condor_ssh_to_job sessions (execd.wire.job_sshd): `JobShell`, what
they need of the job and which of their sshds and setups run now, and their end.

The job's conversation ending kills its sessions and any setup still running; the
job's exit also waits for the sshds to be reaped and removes every session directory
in the sandbox, before the output is sent back (condor_starter reaps its sshd first),
so none goes back as output. A session directory goes as a sandbox goes (rm_argv: any
depth, no link followed, no other file system), in a bounded time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from execd.log import get_logger
from execd.starter.sandbox import rm_argv, rm_error
from execd.wire.sshd_helper import kill_session

log = get_logger("wire")
REAP_WAIT_S = 5.0  # for killed sshds to be reaped at the job's end
REMOVE_TIMEOUT_S = 60.0  # a session directory's removal (a hung mount must not hold it)


@dataclass
class JobShell:
    """What an ssh session into the running job needs: set once the job runs."""

    sandbox: Path
    user: str
    uid: int
    gid: int
    env: dict[str, str]
    pids: list[int]
    cgroup: Path | None  # the sshd's cgroup directory, made on first use; None: none
    sshds: dict[int, asyncio.Task[None]] = field(default_factory=dict)  # by pid
    iwd: Path | None = None  # the job's working directory (_CONDOR_JOB_IWD); None: sandbox
    setups: set[int] = field(default_factory=set)  # setups running now, by pid
    closing: bool = False  # the job exited or its conversation ended: no new session

    def end(self) -> None:
        """The job's conversation ended: its ssh sessions end too, a setup still
        running is killed and no START_SSHD starts anything from now on."""
        self.closing = True
        for pid in [*self.sshds, *self.setups]:
            kill_session(pid)

    async def close(self) -> None:
        """The job has exited: its ssh sessions end and their directories go before
        the output is sent back (condor_starter reaps its sshd first). A session an
        earlier image of execd started (a restart in place) is not its child: its
        directory is removed all the same."""
        self.end()
        if self.sshds:
            await asyncio.wait(list(self.sshds.values()), timeout=REAP_WAIT_S)
        await asyncio.to_thread(remove_sessions, self.sandbox)


def remove_sessions(sandbox: Path) -> None:
    """Every `.condor_ssh_to_job_N` directory in the sandbox (links are left alone)."""
    with contextlib.suppress(OSError), os.scandir(sandbox) as entries:
        for entry in entries:
            if entry.name.startswith(".condor_ssh_to_job_") and \
                    entry.is_dir(follow_symlinks=False):  # fmt: skip
                remove_session(Path(entry.path))


def remove_session(session: Path) -> None:
    """The session directory goes with its sshd (condor_starter's SSHDProc::JobReaper),
    as a sandbox goes (rm_argv: any depth, no link followed, no other file system);
    blocking, bounded (call it off the event loop). What rm cannot remove is logged."""
    try:
        done = subprocess.run(rm_argv(session), capture_output=True, check=False,
                              timeout=REMOVE_TIMEOUT_S)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("sshd_session_not_removed", session=session.name, error=str(exc))
        return
    if (error := rm_error(done.stderr, done.returncode)) is not None:
        log.warning("sshd_session_not_removed", session=session.name, error=error)
