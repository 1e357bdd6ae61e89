"""The hook runner with real programs: stdin/stdout, stderr, timeouts, cancellation."""

from __future__ import annotations

import asyncio
import os
import select
from pathlib import Path

import pytest

from execd.hooks.runner import STDERR_LIMIT, run_hook


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "hook"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def alive(pid: int) -> bool:
    """Whether PID is still running 5 s on: SIGKILL is delivered asynchronously, so wait
    on its pidfd (readable once it has exited) rather than look once."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        readable, _, _ = select.select([fd], [], [], 5)
    finally:
        os.close(fd)
    return not readable


@pytest.mark.asyncio
async def test_a_large_ad_on_stdin_while_the_hook_writes_a_lot_never_deadlocks(
        tmp_path: Path) -> None:
    # both pipes exceed their kernel buffers: the runner must write and read at once
    hook = script(tmp_path, "tee /dev/stderr | wc -c; seq 1 20000\n")
    ad = b"".join(b"Attr%d = %d\n" % (i, i) for i in range(60000))
    lines: list[str] = []
    result = await run_hook([hook], on_line=lines.append, timeout=60, stdin=ad)
    assert result.exit_code == 0
    assert lines[0].strip() == str(len(ad))
    assert lines[1:] == [str(i) for i in range(1, 20001)]
    assert len(result.stderr.encode()) == STDERR_LIMIT  # stderr is kept, bounded


@pytest.mark.asyncio
async def test_a_hook_that_ignores_its_stdin_is_fine(tmp_path: Path) -> None:
    hook = script(tmp_path, "echo done\n")
    lines: list[str] = []
    result = await run_hook([hook], on_line=lines.append, timeout=30, stdin=b"x" * 1_000_000)
    assert result.exit_code == 0 and lines == ["done"]


@pytest.mark.asyncio
async def test_timeout_kills_the_hook_and_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hook = script(tmp_path, f"sleep 600 & echo $! > {pids}; echo started >&2; wait\n")
    result = await run_hook([hook], on_line=lambda _line: None, timeout=1)
    assert result.timed_out and result.signal == 9 and result.exit_code is None
    assert "started" in result.stderr
    assert not alive(int(pids.read_text()))


@pytest.mark.asyncio
async def test_cancelling_the_caller_kills_the_hook(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hook = script(tmp_path, f"echo $$ > {pids}; echo ready; sleep 600\n")
    ready = asyncio.Event()
    task = asyncio.ensure_future(run_hook([hook], on_line=lambda _line: ready.set()))
    await ready.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not alive(int(pids.read_text()))


@pytest.mark.asyncio
async def test_the_loop_keeps_running_while_a_hook_runs(tmp_path: Path) -> None:
    hook = script(tmp_path, "read line; echo \"got $line\"\n")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.ensure_future(tick())
    lines: list[str] = []
    result = await run_hook([hook], on_line=lines.append, timeout=30, stdin=b"ping\n")
    ticker.cancel()
    assert result.exit_code == 0 and lines == ["got ping"]
    assert ticks > 1


@pytest.mark.asyncio
async def test_a_missing_program_is_a_start_error(tmp_path: Path) -> None:
    result = await run_hook([str(tmp_path / "nope")], on_line=lambda _line: None)
    assert result.exit_code is None
    assert result.start_error is not None and "FileNotFoundError" in result.start_error


@pytest.mark.asyncio
async def test_a_failing_line_handler_is_raised_and_the_hook_reaped(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hook = script(tmp_path, f"echo $$ > {pids}; echo one; sleep 600\n")

    def boom(_line: str) -> None:
        raise ValueError("handler broke")

    with pytest.raises(ValueError, match="handler broke"):
        await run_hook([hook], on_line=boom, timeout=60)
    assert not alive(int(pids.read_text()))


@pytest.mark.asyncio
async def test_a_last_line_without_newline_is_delivered(tmp_path: Path) -> None:
    hook = script(tmp_path, "printf 'A = 1\\nB = 2'\n")
    lines: list[str] = []
    await run_hook([hook], on_line=lines.append, timeout=30)
    assert lines == ["A = 1", "B = 2"]
