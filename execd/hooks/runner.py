"""Running one hook program under asyncio: streamed stdout, captured stderr, a timeout.

Every hook (startd cron jobs, fetch-work and job hooks) goes through `run_hook`: the
program runs in its own process group so that a timeout kills it and anything it
started; stdout is handed over line by line as it arrives; stderr is kept (bounded) for
the log. The event loop is never blocked, and a hook that cannot be started, hangs or
dies leaves a HookResult saying so rather than an exception.

Why not asyncio's subprocess API: it costs ~1 ms of daemon CPU per spawn (transports,
protocols, stream readers, and on Python 3.11 a thread per child to wait for it), which
is most of startd cron's cost at 20 hooks a second. Here the spawn is subprocess's
vfork+exec (~0.25 ms, errors such as a missing program raised at once), and the pipes
and a pidfd (the child's exit) are watched with plain loop readers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["HookResult", "run_hook"]

STDERR_LIMIT = 64 * 1024  # bytes of stderr kept for the log; the rest is dropped
_CHUNK = 65536


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


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class _Watch:
    """The loop readers (and writer) of one running hook; all removed by `close`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, proc: subprocess.Popen[bytes],
                 on_line: Callable[[str], None], stdin: bytes | None) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.loop, self.proc, self.on_line = loop, proc, on_line
        self.out_fd, self.err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        self.pidfd = os.pidfd_open(proc.pid)
        self.partial = b""
        self.stderr = bytearray()
        self.stdout_done = loop.create_future()
        self.exited = loop.create_future()
        self.pending = stdin if stdin else b""
        self.in_fd: int | None = None
        for fd in (self.out_fd, self.err_fd):
            os.set_blocking(fd, False)
        loop.add_reader(self.out_fd, self._read_out)
        loop.add_reader(self.err_fd, self._read_err)
        loop.add_reader(self.pidfd, self._exited)
        if proc.stdin is not None:
            self.in_fd = proc.stdin.fileno()
            os.set_blocking(self.in_fd, False)
            if self.pending:
                loop.add_writer(self.in_fd, self._write_in)
            else:
                self._close_stdin()

    def _read_out(self) -> None:
        try:
            chunk = os.read(self.out_fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        try:
            if not chunk:
                self.loop.remove_reader(self.out_fd)
                if self.partial:
                    self._line(self.partial)
                    self.partial = b""
                if not self.stdout_done.done():
                    self.stdout_done.set_result(None)
                return
            *lines, self.partial = (self.partial + chunk).split(b"\n")
            for raw in lines:
                self._line(raw)
        except Exception as exc:  # the caller's ON_LINE failed: run_hook raises it
            self.loop.remove_reader(self.out_fd)
            if not self.stdout_done.done():
                self.stdout_done.set_exception(exc)

    def _line(self, raw: bytes) -> None:
        self.on_line(raw.decode("utf-8", "replace").rstrip("\r"))

    def _read_err(self) -> None:
        try:
            chunk = os.read(self.err_fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.loop.remove_reader(self.err_fd)
            return
        if len(self.stderr) < STDERR_LIMIT:
            self.stderr += chunk[: STDERR_LIMIT - len(self.stderr)]

    def drain_stderr(self) -> None:
        """What the hook wrote to stderr before it exited; a grandchild that inherited
        stderr could keep it open, so nothing waits for its end."""
        while True:
            try:
                chunk = os.read(self.err_fd, _CHUNK)
            except (BlockingIOError, OSError):
                return
            if not chunk:
                return
            if len(self.stderr) < STDERR_LIMIT:
                self.stderr += chunk[: STDERR_LIMIT - len(self.stderr)]

    def _write_in(self) -> None:
        assert self.in_fd is not None
        try:
            written = os.write(self.in_fd, self.pending[:_CHUNK])
        except BlockingIOError:
            return
        except OSError:  # the hook exited without reading all of its input: fine
            self.pending = b""
            written = 0
        self.pending = self.pending[written:]
        if not self.pending:
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self.in_fd is not None:
            self.loop.remove_writer(self.in_fd)
            self.in_fd = None
            assert self.proc.stdin is not None
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def _exited(self) -> None:
        self.loop.remove_reader(self.pidfd)
        if not self.exited.done():
            self.exited.set_result(None)

    def close(self) -> None:
        for fd in (self.out_fd, self.err_fd, self.pidfd):
            self.loop.remove_reader(fd)
        self._close_stdin()
        os.close(self.pidfd)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


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
    loop = asyncio.get_running_loop()
    as_user: dict[str, Any] = {}
    if user is not None:
        as_user = {"user": user[0], "group": user[1], "extra_groups": []}
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,  # its own process group, so a kill reaches its children
            **as_user,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        strerror = getattr(exc, "strerror", None)
        return HookResult(exit_code=None, start_error=f"{type(exc).__name__}: {strerror or exc}")
    watch = _Watch(loop, proc, on_line, stdin)
    if on_start is not None:
        on_start(proc.pid)
    timed_out = False

    def on_timeout() -> None:
        # The timeout kills the hook instead of cancelling our task: a cancellation
        # arriving from the owner at the same moment is then never mistaken for it.
        nonlocal timed_out
        timed_out = True
        _kill_group(proc.pid)

    timer = loop.call_later(timeout, on_timeout) if timeout is not None else None
    try:
        await watch.stdout_done  # under the timer: a grandchild may hold stdout open
        await watch.exited  # still under the timer: it may close stdout and keep running
    except asyncio.CancelledError:
        _kill_group(proc.pid)
        await asyncio.shield(watch.exited)
        raise
    finally:
        if timer is not None:
            timer.cancel()
        _kill_group(proc.pid)  # whatever it left behind in its group goes with it
        # It has exited (reaped at once), or, cancelled twice or ON_LINE failed, its group
        # was just killed: a moment's wait for the kernel, not for the hook.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=None if watch.exited.done() else 1.0)
        if proc.returncode is not None:
            watch.drain_stderr()
        watch.close()
    code = proc.returncode
    killed_by = -code if code is not None and code < 0 else None
    return HookResult(
        exit_code=code if killed_by is None else None,
        signal=killed_by,
        timed_out=timed_out,
        stderr=bytes(watch.stderr).decode("utf-8", "replace"),
    )
