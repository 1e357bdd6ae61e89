"""What a real starter needs around it, made fresh and removed afterwards: a private
cgroup subtree on the real hierarchy, and a work directory with an EXECUTE directory the
job user can traverse and an Iwd it owns (pytest's tmp_path lies inside a directory only
root may enter). Shared by the system tier's fixtures, the VM guest's and bench_starter.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from execd.cgroups.discovery import Hierarchy, discover
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import CgroupTree

NOBODY = pwd.getpwnam("nobody").pw_uid


@contextlib.contextmanager
def private_tree(prefix: str, hierarchy: Hierarchy | None = None) -> Iterator[CgroupTree]:
    """A cgroup subtree named PREFIX-<pid>-<random>, set up with no daemon in its leaf."""
    fs = CgroupFS()
    tree = CgroupTree(fs, hierarchy or discover(fs),
                      f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}")
    tree.setup(daemon_pid=None)
    try:
        yield tree
    finally:
        tree.remove()


@contextlib.contextmanager
def job_workdir(prefix: str) -> Iterator[Path]:
    """A public directory holding `execute/` (0755) and `iwd/` (owned by nobody)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        path.chmod(0o755)
        (path / "execute").mkdir(mode=0o755)
        (path / "iwd").mkdir()
        os.chown(path / "iwd", NOBODY, NOBODY)
        yield path
    finally:
        shutil.rmtree(path)
