"""System-tier fixtures: a private cgroup subtree on the real v2 hierarchy, removed after."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from execd.cgroups.discovery import Hierarchy, discover
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import CgroupTree


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
