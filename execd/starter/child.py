"""What the job's first process does between fork and exec.

Order matters: enter the job's cgroup first (so nothing it starts can be outside it),
then leave the starter's session, forbid gaining privileges, drop them, and exec.
Any failure is written to the error pipe as `errno message` and the child exits 127.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

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
    flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if write else os.O_RDONLY
    opened = os.open(path, flags, 0o644)
    if opened != fd:
        os.dup2(opened, fd)
        os.close(opened)


def become_job(
    *,
    procs_file: str,
    user: JobUser,
    iwd: str,
    stdio: tuple[str | None, str | None, str | None],
    argv: list[str],
    env: Mapping[str, str],
    error_fd: int,
) -> None:
    """Never returns: execs the job, or reports the failure on error_fd and exits 127."""
    try:
        with open(procs_file, "w") as f:
            f.write(str(os.getpid()))
        os.setsid()
        # Before setuid: ctypes may live where the job user cannot read.
        set_no_new_privs()
        os.setgroups(list(user.groups))
        os.setgid(user.gid)
        os.setuid(user.uid)
        os.chdir(iwd)
        _open_stdio(0, stdio[0], iwd, write=False)
        _open_stdio(1, stdio[1], iwd, write=True)
        _open_stdio(2, stdio[2], iwd, write=True)
        os.execve(argv[0], argv, dict(env))  # noqa: S606 - the job's own program, no shell
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        os.write(error_fd, f"{exc.errno or 0} {exc.strerror or exc}{where}".encode())
    except BaseException as exc:  # nothing may escape a forked child
        os.write(error_fd, f"0 {exc!r}".encode())
    os._exit(127)
