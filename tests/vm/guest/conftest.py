"""Fixtures of the guest tests (run inside the VM tier's guest only)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from guest_cgroups import CGROUP_ROOT, SUITE, TestCgroup, enable_controllers, serial


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
