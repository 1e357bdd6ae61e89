"""fork() with the child born in the job's cgroup: clone3(CLONE_INTO_CGROUP), Linux 5.7.

Moving a process into a cgroup afterwards (a write to cgroup.procs) takes the kernel's
cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period when no other
migration happened just before: ~10 ms here, per job, on a job's start (systemd spawns
into cgroups this way for the same reason). A child cloned into its cgroup was never
anywhere else, so nothing it starts can be outside it either.

Python has no clone3: it is called through ctypes with the GIL held (PyDLL), and
Python's own fork hooks (PyOS_BeforeFork and the AfterFork pair) run around it as
os.fork runs them. Only for a single-threaded process (the starter) whose child execs
soon. Where clone3 is refused (an older kernel, a seccomp profile that returns ENOSYS),
`fork_into_cgroup` returns None and the caller forks and moves the child itself.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal

CLONE_INTO_CGROUP = 0x200000000
SYS_CLONE3 = {"x86_64": 435, "aarch64": 435}.get(os.uname().machine)


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size",
        "tls", "set_tid", "set_tid_size", "cgroup")]


_refused = SYS_CLONE3 is None


def fork_into_cgroup(cgroup_dir: str) -> int | None:
    """Like os.fork (0 in the child, its pid in the parent), the child in `cgroup_dir`;
    None where clone3 cannot do it (nothing was forked)."""
    global _refused  # noqa: PLW0603 - learnt once per process
    if _refused:
        return None
    try:
        fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None  # the caller's fork and move report what is wrong with it
    api = ctypes.pythonapi
    libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held across it
    args = _CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=signal.SIGCHLD, cgroup=fd)
    api.PyOS_BeforeFork()
    pid = libc.syscall(SYS_CLONE3, ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))
    if pid == 0:
        api.PyOS_AfterFork_Child()
        os.close(fd)
        return 0
    err = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    os.close(fd)
    if pid < 0:
        # not this kernel's or this sandbox's: fork from now on (other errors: this once)
        _refused = err in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG)
        return None
    return int(pid)
