"""Become the job's user inside the job's cgroup, then exec: how condor_ssh_to_job's
setup script and sshd are started (execd.wire.job_sshd).

Run by the daemon, as root, with `python -S` and no execd import (it is a script, so
its start costs a bare interpreter): Python's subprocess can switch ids before exec
but cannot enter a cgroup there, and a process moved afterwards may already have
forked children outside it (sshd -i starts its session process at once). Order: enter
the cgroup (nothing started later is outside it), a session of its own (the daemon
kills that process group when the job ends), the user's groups, gid, uid, then the
working directory and stderr opened as the user, and exec. Failures are written to
stderr as one line and the exit status is 127.

    sshd_exec.py CGROUP_PROCS|- USER UID GID CWD STDERR|- -- PROGRAM ARG...
"""

from __future__ import annotations

import os
import sys

USAGE = "usage: sshd_exec.py CGROUP_PROCS|- USER UID GID CWD STDERR|- -- PROGRAM ARG..."


def become_and_exec(argv: list[str]) -> None:
    if len(argv) < 8 or argv[6] != "--":
        raise ValueError(USAGE)
    procs, user, uid, gid, cwd, stderr = argv[:6]
    program = argv[7:]
    if int(uid) == 0:
        raise ValueError("refusing to run as root")
    if procs != "-":
        with open(procs, "w", encoding="ascii") as cgroup:
            cgroup.write(str(os.getpid()))
    os.setsid()
    os.setgroups(os.getgrouplist(user, int(gid)))
    os.setgid(int(gid))
    os.setuid(int(uid))
    os.chdir(cwd)
    if stderr != "-":  # opened as the user: a link there leads nowhere it may not write
        fd = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    os.execv(program[0], program)  # noqa: S606 - HTCondor's setup script or the sshd


def main() -> int:
    try:
        become_and_exec(sys.argv[1:])
    except (OSError, ValueError) as exc:
        os.write(2, f"sshd_exec: {exc}\n".encode(errors="replace"))
    return 127


if __name__ == "__main__":
    sys.exit(main())
