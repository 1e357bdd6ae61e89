"""Become the job's user inside the job's cgroup, then exec: how condor_ssh_to_job's
setup script and sshd are started (execd.wire.job_sshd).

Run by the daemon, as root, with `python -I -S`, a fixed environment (PATH only) and
no execd import (it is a script, so its start costs a bare interpreter): Python's
subprocess can switch ids before exec but cannot enter a cgroup there, and a process
moved afterwards may already have forked children outside it (sshd -i starts its
session process at once). The environment the program gets (the job's, which its
owner controls: PYTHONPATH, LD_PRELOAD, ...) arrives on the pipe whose descriptor
ENV_FD names, as NUL-separated NAME=VALUE pairs, never in this process's own
environment or argv (/proc/PID/cmdline is world-readable), and is used only by the
execve after the ids are dropped. Order:
read it, enter the cgroup (nothing started later is outside it), a session of its own
(the daemon kills that process group when the job ends), no supplementary groups (as
the job runs), gid, uid, then the working directory and stderr opened as the user, and
exec. Failures are written to stderr as one line and the exit status is 127.

    sshd_exec.py ENV_FD CGROUP_PROCS|- UID GID CWD STDERR|- -- PROGRAM ARG...
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

USAGE = "usage: sshd_exec.py ENV_FD CGROUP_PROCS|- UID GID CWD STDERR|- -- PROGRAM ARG..."


def read_environment(fd: int) -> dict[str, str]:
    """NUL-separated NAME=VALUE pairs up to the end of the pipe."""
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    env = {}
    for pair in b"".join(chunks).split(b"\0"):
        name, sep, value = pair.partition(b"=")
        if sep and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def no_new_privs() -> Callable[[], None]:
    """prctl(PR_SET_NO_NEW_PRIVS), as execd/starter/child.py sets it for every job:
    resolved now, as root (the interpreter's files may be root's alone), set when
    called (after the id switch)."""
    import ctypes  # noqa: PLC0415 - this helper imports nothing until it needs it

    libc = ctypes.CDLL(None, use_errno=True)

    def set_it() -> None:
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")

    return set_it


def become_and_exec(argv: list[str], env: dict[str, str]) -> None:
    if len(argv) < 7 or argv[5] != "--":
        raise ValueError(USAGE)
    procs, uid, gid, cwd, stderr = argv[:5]
    program = argv[6:]
    if int(uid) == 0:
        raise ValueError("refusing to run as root")
    if procs != "-":
        with open(procs, "w", encoding="ascii") as cgroup:
            cgroup.write(str(os.getpid()))
    set_no_new_privs = no_new_privs()
    os.setsid()
    os.setgroups([])
    os.setgid(int(gid))
    os.setuid(int(uid))
    set_no_new_privs()  # as the job itself: no setuid program gives the session more
    os.chdir(cwd)
    if stderr != "-":  # opened as the user: a link there leads nowhere it may not write
        fd = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    os.execve(program[0], program, env)  # noqa: S606 - HTCondor's setup script or the sshd


def main() -> int:
    try:
        if len(sys.argv) < 2 or not sys.argv[1].isdigit():
            raise ValueError(USAGE)
        env = read_environment(int(sys.argv[1]))
        become_and_exec(sys.argv[2:], env)
    except (OSError, ValueError) as exc:
        os.write(2, f"sshd_exec: {exc}\n".encode(errors="replace"))
    return 127


if __name__ == "__main__":
    sys.exit(main())
