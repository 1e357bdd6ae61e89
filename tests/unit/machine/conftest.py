"""Readers over the recorded nodes in tests/fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from recorded_nodes import FIXTURES, RecordedNvml, h100_recording

from execd.machine.reader import FixtureHostReader


@pytest.fixture
def h100_nvml() -> RecordedNvml:
    return RecordedNvml(h100_recording())


@pytest.fixture
def h100_reader(h100_nvml: RecordedNvml) -> FixtureHostReader:
    return FixtureHostReader(FIXTURES / "h100-node", nvml=h100_nvml)


@pytest.fixture
def hybrid_reader() -> FixtureHostReader:
    return FixtureHostReader(FIXTURES / "hybrid-cgroup-node")


@pytest.fixture
def node_copy(tmp_path: Path) -> Any:
    """Copy a recorded node so a test can add files (a cgroup limit, an os-release)."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(FIXTURES / name, dest)
        return dest

    return copy
