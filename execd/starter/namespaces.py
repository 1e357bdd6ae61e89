"""Per-job namespaces: a PID namespace (USE_PID_NAMESPACES) and a loopback-only network.

PID namespace, as condor_starter does it: the starter unshares CLONE_NEWPID before it
forks, so the job's first process is pid 1 of a new namespace. Pid 1 drops signals it
has no handler for, and orphans are reparented to it, so (like condor_pid_ns_init) that
process is a small init: it mounts a /proc of the new namespace (in its own mount
namespace), forks the job proper (pid 2), forwards the control signals to it, reaps
every orphan, and passes the job's wait status back to the starter through a pipe. When
it exits the kernel kills whatever is left in the namespace.

Network namespace (EXECD_JOB_NETWORK_NAMESPACE): the process about to exec the job
unshares CLONE_NEWNET and brings `lo` up with pyroute2, so the job has loopback only.

Both need root (CAP_SYS_ADMIN); ctypes and pyroute2 are imported only when asked for,
so a starter without namespaces pays nothing for them.
"""

from __future__ import annotations

import os
import signal
import struct
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

# The signals the init passes on to the job (condor_pid_ns_init's set, plus ALRM/CONT);
# any other KillSig the job ad names is added to them.
FORWARDED = frozenset({
    signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGILL, signal.SIGABRT,
    signal.SIGTERM, signal.SIGSEGV, signal.SIGPIPE, signal.SIGUSR1, signal.SIGUSR2,
    signal.SIGALRM, signal.SIGCONT,
})
STATUS = struct.Struct("=i")


def _libc() -> Any:
    import ctypes  # noqa: PLC0415 - only a starter that uses namespaces pays for ctypes

    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes  # noqa: PLC0415 - see _libc

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int, what: str) -> None:
    _check(_libc().unshare(flags), what)


def enter_new_pid_namespace() -> None:
    """Make this process's next child pid 1 of a new PID namespace (the starter calls it)."""
    unshare(CLONE_NEWPID, "unshare(CLONE_NEWPID)")


def mount_own_proc() -> None:
    """A private mount namespace with a /proc that shows only the job's namespace."""
    libc = _libc()
    unshare(CLONE_NEWNS, "unshare(CLONE_NEWNS)")
    # Keep our mounts from propagating back to the host's namespace.
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    _check(
        libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
        "mounting /proc",
    )


def loopback_only() -> None:
    """A new network namespace whose only interface, `lo`, is up."""
    unshare(CLONE_NEWNET, "unshare(CLONE_NEWNET)")
    # The starter runs `python -S`: site-packages (where pyroute2 lives) come in only here.
    import site  # noqa: PLC0415

    site.main()
    from pyroute2 import IPRoute  # noqa: PLC0415 - ~25 MB and ~0.2 s: only when asked for

    with IPRoute() as ipr:
        (index,) = ipr.link_lookup(ifname="lo")
        ipr.link("set", index=index, state="up")


def run_init(job_pid: int, status_fd: int, forwarded: frozenset[int]) -> int:
    """Pid 1's loop: forward signals to the job, reap orphans, report the job's status.

    Signals are blocked and taken with sigwaitinfo: a blocked signal is queued even for
    pid 1 (an unhandled one would be dropped). Returns the exit code for pid 1.
    """
    wanted = {*forwarded, signal.SIGCHLD}
    while True:
        info = signal.sigwaitinfo(wanted)
        if info.si_signo != signal.SIGCHLD:
            try:  # noqa: SIM105 - contextlib is one more import in the job's cgroup
                os.kill(job_pid, info.si_signo)
            except ProcessLookupError:
                pass
            continue
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 0
            if pid == 0:
                break
            if pid == job_pid:
                os.write(status_fd, STATUS.pack(status))
                return os.waitstatus_to_exitcode(status) & 0xFF


def read_job_status(status_fd: int) -> int | None:
    """The job's wait status as the init passed it on; None if the init died first."""
    try:
        data = os.read(status_fd, STATUS.size)
    except BlockingIOError:
        return None
    if len(data) != STATUS.size:
        return None
    (status,) = STATUS.unpack(data)
    return int(status)
