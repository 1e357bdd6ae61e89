"""Fixtures shared by the wire tests that run real jobs."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd.wire.shadow_job import run_as_ids


@pytest.fixture
def box() -> Iterator[tuple[Path, tuple[int, int]]]:
    """A sandbox the job's user (nobody) owns, and that user's ids."""
    path = Path(tempfile.mkdtemp(prefix="execd-jobtest-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    ids = run_as_ids("no-such-user-here")
    os.chown(path, *ids)
    try:
        yield path, ids
    finally:
        shutil.rmtree(path, ignore_errors=True)
