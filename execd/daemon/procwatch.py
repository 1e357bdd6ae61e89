"""Knowing a process by pid and start time, and awaiting its exit without a thread.

A pid alone does not name a process for long: after a daemon restart the starter it
names may be gone and the pid given to another process. The start time in
/proc/<pid>/stat (clock ticks since boot) tells them apart. Exits are awaited through a
pidfd (Linux >= 5.3), which works for a process that is not our child (a starter
re-adopted after `kill -9` of the daemon belongs to init) as well as for one that is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os


def start_time(pid: int, *, zombies: bool = False) -> int | None:
    """Field 22 of /proc/<pid>/stat; None when no such process lives (nor, unless
    `zombies`, when it has exited and waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) may hold spaces and parentheses: split after its closing one
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X") and not zombies:
        return None
    return int(fields[19])


def reap(pid: int) -> int | None:
    """Collect a child's exit status if it is our child and has exited; None otherwise."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None  # not our child (adopted after kill -9): init reaps it
    return status if got == pid else None


def is_child(pid: int) -> bool:
    """Whether `pid` is our child (ended or not), without reaping it."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def open_pidfd(pid: int, started: int) -> int | None:
    """A pidfd for the process `pid` that started at `started`; None if it is gone."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    # Opened first, checked second: the pidfd pins the process we checked.
    if start_time(pid) != started:
        os.close(fd)
        return None
    return fd


async def wait_exit(fd: int) -> None:
    """Return when the process behind the pidfd `fd` has exited; closes `fd`."""
    loop = asyncio.get_running_loop()
    exited = loop.create_future()

    def readable() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await exited
    finally:
        loop.remove_reader(fd)
        with contextlib.suppress(OSError):
            os.close(fd)
