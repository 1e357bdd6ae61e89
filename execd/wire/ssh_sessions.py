"""A running job's condor_ssh_to_job sessions (execd.wire.job_sshd): `JobShell`, what
they need of the job and which of their sshds and setups run now, and their end.

The job's conversation ending kills its sessions and any setup still running; the
job's exit also waits for the sshds to be reaped and removes every session directory
in the sandbox, before the output is sent back (condor_starter reaps its sshd first),
so none goes back as output. A session directory goes as a sandbox goes (rm_argv: any
depth, no link followed, no other file system), in a bounded time.

An interactive job (`InteractiveJob`, condor_submit -interactive) is a placeholder
that the first session's condor_ssh_to_job_shell_setup kills: its end is the end of
its last session, as condor_starter (which counts its sshds among its jobs) ends it.
Its starter waits for the sshds listed in the file the sessions keep in its directory
(execd.starter.sshd_list: written as each sshd starts and is reaped), then kills what
they left with the job, as condor_starter does; a vacate ends them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from execd.cgroups.tree import JOB_LEAF
from execd.classads import lookup_bool
from execd.daemon import procwatch
from execd.log import get_logger
from execd.starter.sandbox import rm_argv, rm_error
from execd.starter.sshd_list import (
    SESSIONS_POLL_S,
    last_status,
    note_sshd_reaped,
    note_sshd_started,
    read_sessions,
    reserve_start,
)
from execd.wire.job_runner import JobExit
from execd.wire.sshd_helper import kill_session

log = get_logger("wire")
REAP_WAIT_S = 5.0  # for killed sshds to be reaped at the job's end
REMOVE_TIMEOUT_S = 60.0  # a session directory's removal (a hung mount must not hold it)
# A START_SSHD that found the starter finished asks once more after this: a starter that
# is still deciding (it polls every SESSIONS_POLL_S) has looked again by then.
FINISHED_RECHECK_S = 2 * SESSIONS_POLL_S


def is_interactive(job: dict[str, object]) -> bool:
    """condor_submit -interactive's job (its ad's InteractiveJob, as LookupBool reads
    it; condor_ssh_to_job_shell_setup kills the job's pids where .job.ad says
    `InteractiveJob = true`)."""
    return lookup_bool(job.get("InteractiveJob")) is True


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
    interactive: bool = False  # is_interactive: the job's end waits for its sessions
    last_sshd_status: int | None = None  # the wait status of the sshd reaped last
    # The starter's list of the sshds it waits for (execd.starter.sshd_list); None: none.
    sshds_file: Path | None = None

    async def reserve_sshd(self) -> Callable[[], None] | None:
        """Before a new sshd's client is answered. None: refuse it, the job is finished
        (an interactive job's starter has stopped waiting for its sessions); else call
        what it returns once the sshd is listed (sshd_started) or was not started. A
        `.finished` seen is looked at again a moment later: a starter still deciding
        removes it when it sees another start under way, and waits on."""
        if not self.interactive or self.sshds_file is None:
            return lambda: None
        try:
            mark = reserve_start(self.sshds_file)
            if mark is None:
                await asyncio.sleep(FINISHED_RECHECK_S)
                mark = reserve_start(self.sshds_file)
        except OSError as exc:  # as an unwritten list (below)
            log.warning("sshd_list_not_written", file=str(self.sshds_file), error=str(exc))
            return lambda: None
        if mark is None:
            return None

        def release() -> None:
            with contextlib.suppress(OSError):
                mark.unlink()
        return release

    def sshd_started(self, pid: int) -> None:
        """A session's sshd runs: an interactive job's starter waits for it."""
        self._note(note_sshd_started, pid)

    def sshd_reaped(self, pid: int, status: int | None) -> None:
        """A session's sshd was reaped (`status`: its wait status, if known): the last
        one's exit is what an interactive job reports."""
        if status is not None:
            self.last_sshd_status = status
        self._note(functools.partial(note_sshd_reaped, status=status), pid)

    def _note(self, note: Callable[[Path, int], None], pid: int) -> None:
        if not self.interactive or self.sshds_file is None:
            return
        try:
            note(self.sshds_file, pid)
        except OSError as exc:  # the starter then ends the job when its placeholder ends
            log.warning("sshd_list_not_written", file=str(self.sshds_file), error=str(exc))

    def adopt_listed(self) -> None:
        """After a restart in place: the sshds an earlier image listed are this
        daemon's children still (the exec kept its pid), but no task of this image
        waits for them. Each (that pid with that start time, ended or not) is waited
        for and reaped here, as this image's own are: its exit is known (the one
        reported if it is the last) and it leaves no zombie."""
        if not self.interactive or self.sshds_file is None:
            return
        if self.last_sshd_status is None:  # one the earlier image reaped
            self.last_sshd_status = last_status(self.sshds_file)
        for pid, started in read_sessions(self.sshds_file):
            if pid in self.sshds or not procwatch.is_child(pid):
                continue  # (not ours, after a kill -9: the slice's kill ends it)
            # Ours and not reaped: the pid cannot be another process's meanwhile.
            if procwatch.start_time(pid, zombies=True) != started:
                continue
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            self.sshds[pid] = asyncio.get_running_loop().create_task(self._adopted(pid, fd))
            log.info("sshd_adopted", pid=pid)

    async def _adopted(self, pid: int, fd: int) -> None:
        await procwatch.wait_exit(fd)
        status = procwatch.reap(pid)
        self.sshds.pop(pid, None)
        self.sshd_reaped(pid, status)
        log.info("sshd_exited", pid=pid, adopted=True,
                 status=None if status is None else os.waitstatus_to_exitcode(status))

    def live_pids(self) -> list[int]:
        """The job's pids for a new session's _CONDOR_JOB_PIDS: where there is a
        cgroup, those still in the job's leaf (an interactive job's placeholder, which
        the first session killed, is not named to the next one: its pid may be another
        process's by then)."""
        if self.cgroup is None:
            return self.pids
        try:
            running = (self.cgroup.parent / JOB_LEAF / "cgroup.procs").read_text().split()
        except OSError:
            return self.pids
        return [pid for pid in self.pids if str(pid) in running]

    def end(self) -> None:
        """The job's conversation ended: its ssh sessions end too, a setup still
        running is killed and no START_SSHD starts anything from now on."""
        self.closing = True
        for pid in [*self.sshds, *self.setups]:
            kill_session(pid)

    def reported_exit(self, done: JobExit) -> JobExit:
        """The exit the shadow is told. An interactive job whose sessions outlived it
        ends as its last session's sshd did: condor_starter publishes its procs in the
        order they were reaped (publishJobExitAd) and an interactive job's SSHDProc
        publishes its own exit (sshd_proc.cpp PublishUpdateAd), so the last sshd's
        ExitCode or ExitSignal (sshd -i: 0 after a normal logout) overrides the
        placeholder's (SIGTERM, from condor_ssh_to_job_shell_setup). A job that was
        evicted meanwhile keeps its eviction."""
        if not self.interactive or not done.outlived_by_sessions or done.requested \
                or self.last_sshd_status is None:  # fmt: skip
            return done
        return dataclasses.replace(done, wait_status=self.last_sshd_status)

    async def close(self) -> None:
        """The job has exited: its ssh sessions end and their directories go before
        the output is sent back (condor_starter reaps its sshd first). A session an
        earlier image of execd started (a restart in place) is not its child: its
        directory is removed all the same. An interactive job's starter waited for its
        sessions already (execd.starter.sshd_list) and ended what they left."""
        self.pids = []  # reaped: never named to a session's shell setup again
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
