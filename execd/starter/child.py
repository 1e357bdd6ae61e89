"""What the job's first process does between fork and exec.

Order matters: enter the job's cgroup first (so nothing it starts can be outside it),
then leave the starter's session, forbid gaining privileges, drop them, and exec.
Any failure is written to the error pipe as `errno message` and the child exits 127.

With USE_PID_NAMESPACES this first process is pid 1 of the job's PID namespace: it
becomes the namespace's init (execd/starter/namespaces.py), the job proper is its child,
and the error pipe is closed once the job has exec'd.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import NamedTuple

from execd.starter.sandbox import JobUser

PR_SET_NO_NEW_PRIVS = 38


def set_no_new_privs() -> None:
    import ctypes  # noqa: PLC0415 - only the child pays for ctypes, just before exec

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _open_stdio(fd: int, path: str | None, base: str, write: bool) -> None:
    if path is None:
        path = os.devnull
    elif not os.path.isabs(path):
        path = os.path.join(base, path)
    if not write:
        opened = os.open(path, os.O_RDONLY)
    else:
        # As HTCondor's starter: appending, so that stdout and stderr naming one file
        # both land in it in the order written; not truncated if that is refused.
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        try:
            opened = os.open(path, flags | os.O_TRUNC, 0o644)
        except PermissionError:
            opened = os.open(path, flags, 0o644)
    if opened != fd:
        os.dup2(opened, fd)
        os.close(opened)


def _drop_privileges(user: JobUser) -> None:
    # Before setuid: ctypes may live where the job user cannot read.
    set_no_new_privs()
    os.setgroups(list(user.groups))
    os.setgid(user.gid)
    os.setuid(user.uid)


class JobExec(NamedTuple):
    """What the process that execs the job needs."""

    user: JobUser
    iwd: str
    stdio: tuple[str | None, str | None, str | None]
    argv: list[str]
    env: Mapping[str, str]
    network_namespace: bool


# HTCondor's words for an Iwd the job cannot enter (daemon_core's Create_Process).
IWD_UNREACHABLE = "Cannot access initial working directory"


def _reset_ignored_signals() -> None:
    """An ignored signal stays ignored across exec. The starter ignores SIGHUP (the
    daemon going away is not its end) and Python ignores SIGXFSZ: the job gets their
    defaults. SIGPIPE stays ignored, as under condor_starter (a daemon-core process
    ignores it, and its jobs inherit that: SigIgn 0x1000 in the pool's jobs)."""
    for signum in signal.valid_signals():
        if signum != signal.SIGPIPE and signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)


def _exec_job(job: JobExec) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    _reset_ignored_signals()
    if job.network_namespace:
        from execd.starter.namespaces import loopback_only  # noqa: PLC0415 - only when asked

        loopback_only()
    _drop_privileges(job.user)
    try:
        os.chdir(job.iwd)
    except OSError as exc:  # not the executable's fault: say which directory
        raise OSError(exc.errno, f'{IWD_UNREACHABLE} "{job.iwd}"') from None
    _open_stdio(0, job.stdio[0], job.iwd, write=False)
    _open_stdio(1, job.stdio[1], job.iwd, write=True)
    _open_stdio(2, job.stdio[2], job.iwd, write=True)
    os.execve(job.argv[0], job.argv, dict(job.env))  # noqa: S606 - the job's own program


def _report(error_fd: int, exc: BaseException) -> None:
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        os.write(error_fd, f"{exc.errno or 0} {exc.strerror or exc}{where}".encode())
    else:
        os.write(error_fd, f"0 {exc!r}".encode())


def _be_pid_namespace_init(
    job: JobExec, error_fd: int, status_fd: int, forwarded: frozenset[int]
) -> int:
    """Pid 1: fork the job, tell the starter it runs, then forward signals and reap."""
    from execd.starter import namespaces  # noqa: PLC0415 - only with USE_PID_NAMESPACES

    namespaces.mount_own_proc()
    # Blocked before the fork so no signal meant for the job is lost; the job unblocks.
    signal.pthread_sigmask(signal.SIG_BLOCK, {*forwarded, signal.SIGCHLD})
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            os.setsid()  # the job leads its own session, as without a namespace
            _exec_job(job)
        except BaseException as exc:  # nothing may escape a forked child
            _report(write_fd, exc)
        os._exit(127)
    os.close(write_fd)
    failure = os.read(read_fd, 4096)
    os.close(read_fd)
    if failure:
        os.write(error_fd, failure)
        os.waitpid(pid, 0)
        return 127
    os.close(error_fd)  # EOF: the starter knows the job has exec'd
    _drop_privileges(job.user)  # the init runs as the job's user, like the job
    return namespaces.run_init(pid, status_fd, forwarded)


def become_job(
    *,
    procs_file: str | None,
    user: JobUser,
    iwd: str,
    stdio: tuple[str | None, str | None, str | None],
    argv: list[str],
    env: Mapping[str, str],
    error_fd: int,
    network_namespace: bool = False,
    status_fd: int | None = None,
    forwarded: frozenset[int] = frozenset(),
) -> None:
    """Never returns: execs the job, or reports the failure on error_fd and exits 127.

    `status_fd` set: this process is pid 1 of a new PID namespace (see module doc).
    `procs_file` None: it was born in the job's cgroup (execd/starter/clone.py).
    """
    try:
        if procs_file is not None:
            with open(procs_file, "w") as f:
                f.write(str(os.getpid()))
        os.setsid()
        job = JobExec(user, iwd, stdio, argv, env, network_namespace)
        if status_fd is not None:
            os._exit(_be_pid_namespace_init(job, error_fd, status_fd, forwarded))
        _exec_job(job)
    except BaseException as exc:  # nothing may escape a forked child
        _report(error_fd, exc)
    os._exit(127)
