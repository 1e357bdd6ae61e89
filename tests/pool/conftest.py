"""The pool tier: a real HTCondor pool kept for the whole session, stopped however it ends.

One pool runs in the chroot at a time (it mounts over the chroot's /run). The session
keeps it running across tests; a test that asks for the other mode (with or without
HTCondor's own startd) stops it and starts that one, so tests of one mode should sit
together (the reference-startd tests last in a module).
"""

from __future__ import annotations

from collections.abc import Iterator

import pool_harness as harness
import pytest


@pytest.fixture(scope="session")
def running_pool() -> Iterator[harness.RunningPool]:
    holder = harness.RunningPool()
    try:
        yield holder
    finally:
        holder.close()


@pytest.fixture
def pool(running_pool: harness.RunningPool) -> harness.Pool:
    """A pool with collector, negotiator and schedd and no execute point (execd's place)."""
    return running_pool.get(with_startd=False)


@pytest.fixture
def reference_pool(running_pool: harness.RunningPool) -> harness.Pool:
    """The same pool with HTCondor's own startd: the reference execute point."""
    return running_pool.get(with_startd=True)
