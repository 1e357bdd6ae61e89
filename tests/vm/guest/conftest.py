"""Fixtures of the guest tests (run inside the VM tier's guest only)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from guest_cgroups import CGROUP_ROOT, SUITE, TestCgroup, enable_controllers, serial

from execd.cgroups.tree import CgroupTree
from tests.starter_dirs import job_workdir, private_tree


@pytest.fixture
def cgroup() -> Iterator[TestCgroup]:
    """A fresh subtree under the suite's cgroup with memory, cpu and pids offered."""
    enable_controllers(CGROUP_ROOT)
    SUITE.mkdir(exist_ok=True)
    enable_controllers(SUITE)
    test_cgroup = TestCgroup(SUITE / f"t{os.getpid()}-{next(serial)}")
    test_cgroup.path.mkdir()
    enable_controllers(test_cgroup.path)
    try:
        yield test_cgroup
    finally:
        test_cgroup.remove()


@pytest.fixture
def tree() -> Iterator[CgroupTree]:
    """A private cgroup tree for a real starter's jobs."""
    with private_tree("execd-vm") as t:
        yield t


@pytest.fixture
def workdir() -> Iterator[Path]:
    with job_workdir("execd-vm-") as path:
        yield path
