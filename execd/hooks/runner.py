"""Running one hook program under asyncio: streamed stdout, captured stderr, a timeout.

Every hook (startd cron jobs, and later fetch-work and job hooks) goes through
`run_hook`: the program runs in its own process group so that a timeout kills it and
anything it started; stdout is handed over line by line as it arrives; stderr is kept
(bounded) for the log. The event loop is never blocked, and a hook that cannot be
started, hangs or dies leaves a HookResult saying so rather than an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["HookResult", "run_hook"]

STDERR_LIMIT = 64 * 1024  # bytes of stderr kept for the log; the rest is dropped


@dataclass(frozen=True)
class HookResult:
    exit_code: int | None  # None when it never started or was killed by a signal
    signal: int | None = None  # the signal that ended it, if any
    timed_out: bool = False
    stderr: str = ""
    start_error: str | None = None  # why it could not be started (not found, permission)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


async def _pump_lines(stream: asyncio.StreamReader, on_line: Callable[[str], None]) -> None:
    while True:
        raw = await stream.readline()
        if not raw:
            return
        on_line(raw.decode("utf-8", "replace").rstrip("\r\n"))


async def _read_bounded(stream: asyncio.StreamReader) -> bytes:
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < STDERR_LIMIT:
            kept += chunk[: STDERR_LIMIT - len(kept)]
    return bytes(kept)


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    """Write DATA and close; a hook that exits without reading its input is fine."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data)
        await stream.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.close()
        await stream.wait_closed()


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def run_hook(
    argv: Sequence[str],
    *,
    on_line: Callable[[str], None],
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    on_start: Callable[[int], None] | None = None,
    stdin: bytes | None = None,
    user: tuple[int, int] | None = None,
) -> HookResult:
    """Run ARGV, calling ON_LINE for each stdout line; kill it after TIMEOUT seconds.

    ON_START gets the pid once it runs (to signal it on reconfig). STDIN, when given,
    is written to the hook's standard input (an ad), then closed. USER is (uid, gid) to
    run it as, with no supplementary groups. Cancelling the calling task kills the
    hook's process group too.
    """
    as_user: dict[str, Any] = {}
    if user is not None:
        as_user = {"user": user[0], "group": user[1], "extra_groups": []}
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,  # its own process group, so a kill reaches its children
            **as_user,
        )
    )
    try:
        # Shielded: asyncio, cancelled mid-spawn, kills only the hook's own pid and then
        # waits for its pipes, which a child it started may hold open for good.
        proc = await asyncio.shield(spawn)
    except OSError as exc:
        why = f"{type(exc).__name__}: {exc.strerror or exc}"
        return HookResult(exit_code=None, start_error=why)
    except asyncio.CancelledError:
        with contextlib.suppress(OSError):
            started = await spawn
            _kill_group(started)
            await started.wait()
        raise
    assert proc.stdout is not None and proc.stderr is not None
    if on_start is not None:
        on_start(proc.pid)
    stderr_task = asyncio.ensure_future(_read_bounded(proc.stderr))
    stdin_task = None
    if stdin is not None and proc.stdin is not None:
        stdin_task = asyncio.ensure_future(_feed(proc.stdin, stdin))
    timed_out = False

    def on_timeout() -> None:
        # The timeout kills the hook instead of cancelling our task: a cancellation
        # arriving from the owner at the same moment is then never mistaken for it.
        nonlocal timed_out
        timed_out = True
        _kill_group(proc)

    timer = None
    if timeout is not None:
        timer = asyncio.get_running_loop().call_later(timeout, on_timeout)
    try:
        await _pump_lines(proc.stdout, on_line)
        await proc.wait()  # still under the timer: it may close stdout and keep running
    except asyncio.CancelledError:
        _kill_group(proc)
        stderr_task.cancel()
        if stdin_task is not None:
            stdin_task.cancel()
        await proc.wait()
        raise
    finally:
        if timer is not None:
            timer.cancel()
    if stdin_task is not None:
        await stdin_task
    # a grandchild that inherited stderr could keep it open: don't wait for it forever
    _kill_group(proc)
    stderr = await stderr_task
    code = proc.returncode
    killed_by = -code if code is not None and code < 0 else None
    return HookResult(
        exit_code=code if killed_by is None else None,
        signal=killed_by,
        timed_out=timed_out,
        stderr=stderr.decode("utf-8", "replace"),
    )
