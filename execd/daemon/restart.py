"""Restart in place (SIGUSR2, `execd restart`): the daemon re-executes itself.

The same process runs the (possibly upgraded) program again: the pid does not change,
so systemd (Type=notify; it is told RELOADING=1 first and READY=1 by the new image),
a shell's job control, and a supervisor that watches the pid all see one daemon that
kept running. Starters are left alone: they are in their own sessions and the store
names them; the new image re-adopts them (execd.daemon.recovery). Descriptors are
close-on-exec, so the pidfile's lock and the control socket are let go and taken again.
`--daemon` is dropped from the command line: the process is already detached.
"""

from __future__ import annotations

import os
import sys


def reexec_argv() -> list[str]:
    """The interpreter and arguments this process was started with, without --daemon."""
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    return [a for a in argv if a != "--daemon"]


def reexec() -> None:
    """Replace this process with a fresh run of the same command; does not return."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            continue
    argv = reexec_argv()
    os.execv(sys.executable, argv)  # noqa: S606 - our own command line, no shell
