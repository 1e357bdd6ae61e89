"""The starter's walks over a job's scratch directory (execd/starter/sandbox.py) at any
depth: a tree a job makes 1100 levels deep is measured (DiskUsage), chowned and removed;
os.walk and shutil.rmtree recursed per level and the starter died with RecursionError
before its report (seen in the pool: the job was evicted and rerun, over and over).
The one removal (remove_tree) says what it left; the shadow conversation logs it."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
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
    (kept / "stuck").write_bytes(b"x")
    if not immutable(kept / "stuck", True):
        pytest.skip("chattr +i needs root and a file system with the flag")
    try:
        error = remove_tree(kept)
        assert error is not None
        assert "stuck" in error and "Operation not permitted" in error
        assert (kept / "stuck").exists()
    finally:
        immutable(kept / "stuck", False)
    assert remove_tree(kept) is None


def test_the_shadow_logs_what_rm_left_of_a_sandbox(tmp_path: Path) -> None:
    sandbox = tmp_path / "dir_1"
    sandbox.mkdir()
    (sandbox / "stuck").write_bytes(b"x")
    if not immutable(sandbox / "stuck", True):
        pytest.skip("chattr +i needs root and a file system with the flag")
    try:
        with capture_logs() as events:
            asyncio.run(remove_sandbox(sandbox, ShadowOptions(), handed_over=False))
    finally:
        immutable(sandbox / "stuck", False)
    [left] = [e for e in events if e["event"] == "shadow_sandbox_not_removed"]
    assert left["sandbox"] == str(sandbox)
    assert "stuck" in left["error"] and "Operation not permitted" in left["error"]
    with capture_logs() as events:
        asyncio.run(remove_sandbox(sandbox, ShadowOptions(), handed_over=False))
    assert not sandbox.exists()
    assert not [e for e in events if e["event"] == "shadow_sandbox_not_removed"]
