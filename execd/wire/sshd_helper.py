"""Starting sshd_exec.py, the root helper that runs condor_ssh_to_job's setup and sshd
as the job's user (execd.wire.job_sshd), and reading what it says.

The helper starts as root with an environment of its own (PATH only) and `python -I
-S`: nothing the job's owner chose (PYTHONPATH, LD_PRELOAD, ...) acts while it is
root. The environment the program is to get goes to it on a pipe, NUL-separated,
never in argv (/proc/PID/cmdline is world-readable). A program's output is read up
to a cap, and a helper is killed by its process group and by its pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

EXEC_HELPER = str(Path(__file__).with_name("sshd_exec.py"))
HELPER_ENV = {"PATH": "/usr/bin:/bin"}  # the root helper's own: nothing of the job's
ENV_FD_MARK = "{env_fd}"  # replaced by the number of the pipe's read end


def helper_argv(procs: str, ids: tuple[int, int], cwd: str, stderr: str,
                program: list[str]) -> list[str]:  # fmt: skip
    """sshd_exec.py's command line (its descriptor number filled in by spawn_helper)."""
    return [sys.executable, "-I", "-S", EXEC_HELPER, ENV_FD_MARK, procs, str(ids[0]),
            str(ids[1]), cwd, stderr, "--", *program]  # fmt: skip


def environment_bytes(env: dict[str, str]) -> bytes:
    return b"".join(os.fsencode(name) + b"=" + os.fsencode(value) + b"\0"
                    for name, value in env.items() if name and "=" not in name)  # fmt: skip


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the helper failed before reading: it says why
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    os.close(fd)


async def spawn_helper(argv: list[str], env: dict[str, str], *, stdin: int,
                        stdout: int, stderr: int) -> asyncio.subprocess.Process:  # fmt: skip
    """The root helper, started with a fixed environment; `env` (the job's, its owner's
    to choose) goes to it on a pipe (the descriptor's number in its argv) and only
    reaches the program it execs as the job's user."""
    read_end, write_end = os.pipe()
    try:
        argv = [str(read_end) if arg == ENV_FD_MARK else arg for arg in argv[:5]] + argv[5:]
        proc = await asyncio.create_subprocess_exec(
            *argv, env=HELPER_ENV, close_fds=True, pass_fds=(read_end,),
            stdin=stdin, stdout=stdout, stderr=stderr)  # fmt: skip
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    await asyncio.to_thread(_write_all, write_end, environment_bytes(env))
    return proc


class OutputTooLongError(Exception):
    """A program wrote more than the reader's cap."""


async def read_capped(read_end: int, proc: asyncio.subprocess.Process, cap: int) -> bytes:
    """A program's output to its end and its exit, or OutputTooLongError past `cap`
    bytes: the setup runs as the job's user, who can make it write without end (a link
    to /dev/zero). The pipe is the daemon's own, closed here whatever happens, so that
    waiting for the killed setup does not wait for the pipe's end too."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(loop=loop)
    pipe = os.fdopen(read_end, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)  # fmt: skip
    try:
        chunks, size = [], 0
        while chunk := await reader.read(65536):
            size += len(chunk)
            if size > cap:
                raise OutputTooLongError
            chunks.append(chunk)
    finally:
        transport.close()
    await proc.wait()
    return b"".join(chunks)


def kill_session(pid: int) -> None:
    """SIGKILL to a helper's process group, and to the helper itself: one that has not
    yet made its session (setsid) is still in the daemon's group."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)
