"""The starter's walks over a job's scratch directory (execd/starter/sandbox.py) at any
depth: a tree a job makes 1100 levels deep is measured (DiskUsage), chowned and removed;
os.walk and shutil.rmtree recursed per level and the starter died with RecursionError
before its report (seen in the pool: the job was evicted and rerun, over and over).
The one removal (remove_tree) says what it left; the shadow conversation logs it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import subprocess
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from execd.starter.sandbox import JobUser, adopt_scratch, disk_usage_kb, remove_tree
from execd.wire.shadow import ShadowOptions
from execd.wire.shadow_end import remove_sandbox

LEVELS = 1100


def deep_tree(top: Path) -> str:
    deepest = str(top)
    for _ in range(LEVELS):
        deepest += "/d"
        os.mkdir(deepest)
    Path(deepest, "f.bin").write_bytes(b"x" * 65536)
    return deepest


def test_a_deep_scratch_is_measured_adopted_and_removed(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    try:
        deepest = deep_tree(scratch)
        assert disk_usage_kb(str(scratch)) >= 64  # the file at the bottom counted
        me = JobUser("me", os.getuid(), os.getgid(), ())
        adopt_scratch(str(scratch), me)
        assert os.lstat(os.path.join(deepest, "f.bin")).st_uid == os.getuid()
        assert stat.S_IMODE(scratch.stat().st_mode) == 0o700
        remove_tree(str(scratch))
        assert not scratch.exists()
    finally:  # pytest's own clean-up of old tmp_paths recurses too
        subprocess.run(["/bin/rm", "-rf", "--", str(scratch)], check=True)


def immutable(path: Path, on: bool) -> bool:
    """chattr +i / -i (ext4, root): a file even root's rm cannot remove."""
    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], check=False,
                          capture_output=True)  # fmt: skip
    return done.returncode == 0


@contextlib.contextmanager
def stuck(path: Path) -> Iterator[None]:
    """A file at `path` that no rm can remove while the block runs (skips where chattr +i
    is unavailable); removable again after it."""
    path.write_bytes(b"x")
    if not immutable(path, True):
        pytest.skip("chattr +i needs root and a file system with the flag")
    try:
        yield
    finally:
        immutable(path, False)


def test_remove_tree_says_what_rm_left_and_none_when_all_went(tmp_path: Path) -> None:
    # One removal for the starter (which ignores the answer) and the daemon's shadow
    # conversation (which logs it: shadow_end.remove_sandbox)
    gone = tmp_path / "gone"
    (gone / "d").mkdir(parents=True)
    (gone / "d" / "f").write_bytes(b"x")
    assert remove_tree(gone) is None
    assert not gone.exists()

    kept = tmp_path / "kept"
    kept.mkdir()
    with stuck(kept / "stuck"):
        error = remove_tree(kept)
        assert error is not None
        assert "stuck" in error and "Operation not permitted" in error
        assert (kept / "stuck").exists()
    assert remove_tree(kept) is None


def test_the_shadow_logs_what_rm_left_of_a_sandbox(tmp_path: Path) -> None:
    sandbox = tmp_path / "dir_1"
    sandbox.mkdir()
    with stuck(sandbox / "stuck"), capture_logs() as events:
        asyncio.run(remove_sandbox(sandbox, ShadowOptions(), handed_over=False))
    [left] = [e for e in events if e["event"] == "shadow_sandbox_not_removed"]
    assert left["sandbox"] == str(sandbox)
    assert "stuck" in left["error"] and "Operation not permitted" in left["error"]
    with capture_logs() as events:
        asyncio.run(remove_sandbox(sandbox, ShadowOptions(), handed_over=False))
    assert not sandbox.exists()
    assert not [e for e in events if e["event"] == "shadow_sandbox_not_removed"]


def children_running(needle: str) -> list[int]:
    """This process's children whose command line names `needle` (the rm of a sandbox)."""
    pids = []
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as children:
            pids += [int(pid) for pid in children.read().split()]
    found = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if needle.encode() in cmdline.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def test_a_stuck_sandbox_removal_does_not_hold_another_conversations(tmp_path: Path) -> None:
    # Each conversation removes its sandbox with an rm of its own: the first one's rm is
    # stopped (as if hung on a dead mount) and the second sandbox still goes at once.
    slow, quick = tmp_path / "dir_slow", tmp_path / "dir_quick"
    for sandbox in (slow, quick):
        sandbox.mkdir()
    for i in range(20000):
        (slow / f"f{i}").touch()
    (quick / "f").touch()

    async def both() -> None:
        first = asyncio.create_task(remove_sandbox(slow, ShadowOptions(), handed_over=False))
        while not (rms := children_running(str(slow))):
            assert not first.done(), "the first rm ended before it could be stopped"
            await asyncio.sleep(0)  # not a wait for time: yields until its rm exists
        [pid] = rms
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.wait_for(
                remove_sandbox(quick, ShadowOptions(), handed_over=False), 30)
            assert not quick.exists() and slow.exists()
        finally:
            os.kill(pid, signal.SIGCONT)
        await first

    asyncio.run(both())
    assert not slow.exists()


def test_rm_error_output_is_read_only_so_far(tmp_path: Path) -> None:
    # A tree of thousands of entries rm cannot remove (an immutable directory): rm writes
    # megabytes of errors; what is kept of them is bounded, for the starter's removal and
    # the shadow's, and what they say is still the start of it.
    for name in ("starter", "shadow"):
        sandbox = tmp_path / name
        stuck = sandbox / "stuck"
        stuck.mkdir(parents=True)
        for i in range(20000):
            (stuck / f"{i:06d}{'f' * 200}").touch()
        if not immutable(stuck, True):
            pytest.skip("chattr +i needs root and a file system with the flag")
        try:
            tracemalloc.start()
            with capture_logs() as events:
                if name == "starter":
                    error = remove_tree(sandbox)
                else:
                    asyncio.run(remove_sandbox(sandbox, ShadowOptions(), handed_over=False))
                    [left] = [e for e in events if e["event"] == "shadow_sandbox_not_removed"]
                    error = left["error"]
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        finally:
            immutable(stuck, False)
        assert error is not None and "Operation not permitted" in error, name
        assert peak < 1_000_000, (name, peak)  # rm wrote over 4 MB
        remove_tree(sandbox)
