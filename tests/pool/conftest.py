"""The pool tier: a real HTCondor pool kept for the whole session, stopped however it ends.

One pool runs in the chroot at a time (it mounts over the chroot's /run). The session
keeps it running across tests; a test that asks for the other mode (with or without
HTCondor's own startd) stops it and starts that one, so tests of one mode should sit
together (the reference-startd tests last in a module).
"""

from __future__ import annotations

from collections.abc import Iterator

import pool_harness as harness
import pool_node
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
def idtokens_pool(running_pool: harness.RunningPool) -> harness.Pool:
    """The pool with IDTOKENS as its only authentication method (no claim-id sessions)."""
    return running_pool.get(with_startd=False, idtokens=True)


@pytest.fixture
def reference_pool(running_pool: harness.RunningPool) -> harness.Pool:
    """The same pool with HTCondor's own startd: the reference execute point."""
    return running_pool.get(with_startd=True)


@pytest.fixture(autouse=True)
def no_execd_left(running_pool: harness.RunningPool) -> Iterator[None]:
    """After every test: its execds stopped and the pool without execute points.

    A test that fails (or forgets to stop its execd) must not leave an execd advertised:
    every later test would see its slots. Stale ads of a killed execd are invalidated.
    Reference-startd pools keep their own startd's ads.
    """
    yield
    pool_node.stop_started_nodes()
    pool = running_pool.current
    if pool is not None and not pool.with_startd and pool.master is not None:
        pool_node.clear_execute_points(pool)
