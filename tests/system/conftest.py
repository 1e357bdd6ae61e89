"""System-tier fixtures: a private cgroup subtree on the real v2 hierarchy, removed after."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from execd.cgroups.discovery import Hierarchy, discover
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import CgroupTree
from execd.starter.spec import StarterSpec

NOBODY = 65534


@pytest.fixture
def hierarchy() -> Hierarchy:
    return discover(CgroupFS())


@pytest.fixture
def tree(hierarchy: Hierarchy) -> Iterator[CgroupTree]:
    name = f"execd-test-{os.getpid()}-{secrets.token_hex(4)}"
    t = CgroupTree(CgroupFS(), hierarchy, name)
    t.setup(daemon_pid=None)
    try:
        yield t
    finally:
        t.remove()


@pytest.fixture
def workdir() -> Iterator[Path]:
    """An EXECUTE directory the job user can traverse (pytest's tmp is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="execd-test-"))
    path.chmod(0o755)
    (path / "execute").mkdir(mode=0o755)
    (path / "iwd").mkdir()
    os.chown(path / "iwd", NOBODY, NOBODY)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.fixture
def make_spec(tree: CgroupTree, workdir: Path) -> Callable[..., StarterSpec]:
    def make(script: str, **kw: object) -> StarterSpec:
        spec = StarterSpec(
            job_id="1.0",
            slot_name="slot1_1",
            cmd="/bin/sh",
            args=["-c", script],
            env={"FROM_JOB": "yes"},
            owner="no-such-user-execd",
            execute_dir=str(workdir / "execute"),
            report_path=str(workdir / "report.json"),
            cgroup_mount=str(tree.hierarchy.mount),
            base_cgroup=str(tree.base.relative_to(tree.hierarchy.mount)),
            iwd=str(workdir / "iwd"),
            stdout="out.txt",
            stderr="err.txt",
            polling_interval=0.2,
        )
        return spec._replace(**kw)

    return make
