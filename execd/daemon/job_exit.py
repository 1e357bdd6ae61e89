"""The starter's job-exit notice: a FIFO in the job's directory.

The starter writes one line (`job_exited`) the moment its job has exited, before it
cleans up; the daemon then moves the slot Claimed/Busy -> Claimed/Cleaning, and the
starter's own exit later ends Cleaning, as condor_startd's slots go. The daemon opens the
read end before launching the starter (after a restart, when it adopts it), so the notice
is never written to a FIFO nobody reads; if it is lost all the same, the starter's exit
says the job ended.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Protocol, TypeVar


class Listening(Protocol):
    exit_fifo: int | None  # the read end, while open


J = TypeVar("J", bound=Listening)


def listen(job: J, path: str, exited: Callable[[J], None]) -> None:
    """Call `exited(job)` when the starter says the job has exited."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # the starter's exit will say it
    job.exit_fifo = fd
    asyncio.get_running_loop().add_reader(fd, take, job, exited)


def take(job: J, exited: Callable[[J], None]) -> None:
    """Read the notice if it is there (and stop listening); nothing yet: keep listening."""
    if job.exit_fifo is None:
        return
    try:
        said = os.read(job.exit_fifo, 64)
    except BlockingIOError:
        return
    except OSError:
        said = b""
    asyncio.get_running_loop().remove_reader(job.exit_fifo)
    os.close(job.exit_fifo)
    job.exit_fifo = None
    if said.startswith(b"job_exited"):
        exited(job)
