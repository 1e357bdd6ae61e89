"""System-tier fixtures: a private cgroup subtree on the real v2 hierarchy, removed after."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from execd.cgroups.discovery import Hierarchy, discover
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import CgroupTree
from execd.starter.spec import StarterSpec
from tests.starter_dirs import job_workdir, private_tree

NOBODY = 65534


@pytest.fixture
def hierarchy() -> Hierarchy:
    return discover(CgroupFS())


@pytest.fixture
def tree(hierarchy: Hierarchy) -> Iterator[CgroupTree]:
    with private_tree("execd-test", hierarchy) as t:
        yield t


@pytest.fixture
def workdir() -> Iterator[Path]:
    """An EXECUTE directory the job user can traverse (pytest's tmp is root-only)."""
    with job_workdir("execd-test-") as path:
        yield path


@pytest.fixture
def fifo() -> Iterator[Path]:
    """A FIFO anyone may open, in a directory the job user can traverse: a job blocks
    reading it until the test writes (a go signal, no sleeps)."""
    with tempfile.TemporaryDirectory(prefix="execd-fifo-") as tmp:
        Path(tmp).chmod(0o755)
        path = Path(tmp) / "go"
        os.mkfifo(path)
        path.chmod(0o666)
        yield path


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
