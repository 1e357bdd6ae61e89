"""The starter's walks over a job's scratch directory (execd/starter/sandbox.py) at any
depth: a tree a job makes 1100 levels deep is measured (DiskUsage), chowned and removed;
os.walk and shutil.rmtree recursed per level and the starter died with RecursionError
before its report (seen in the pool: the job was evicted and rerun, over and over)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from execd.starter.sandbox import JobUser, adopt_scratch, disk_usage_kb, remove_tree

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
