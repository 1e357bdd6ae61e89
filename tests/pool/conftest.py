"""The pool tier: a real HTCondor pool kept for the whole session, stopped however it ends.

One pool runs in the chroot at a time (it mounts over the chroot's /run). The session
keeps it running across tests; a test that asks for the other mode (with or without
HTCondor's own startd) stops it and starts that one, so tests of one mode should sit
together (the reference-startd tests last in a module).

A test that fails keeps its logs (the HTCondor daemons' part of them, its execds'):
pool_logs.py; the failure report's "pool logs" section says where.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pool_harness as harness
import pool_logs
import pool_node
import pytest

LOGS = pytest.StashKey[pool_logs.TestLogs]()
FAILED = pytest.StashKey[bool]()


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
def kept_logs(
    request: pytest.FixtureRequest,
    running_pool: harness.RunningPool,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[pool_logs.TestLogs]:
    """The test's log directory (kept or removed once its teardown has run)."""
    root = Path(os.environ.get(pool_logs.ROOT_ENV) or
                tmp_path_factory.getbasetemp() / "pool-logs")  # fmt: skip
    logs = pool_logs.TestLogs(root / pool_logs.test_dir_name(request.node.nodeid), running_pool)
    request.node.stash[LOGS] = logs
    running_pool.before_wipe = logs.keep_pool_logs
    pool_node.LOG_PLACE = logs.execd_log
    try:
        yield logs
    finally:
        running_pool.before_wipe = None
        pool_node.LOG_PLACE = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """A failed phase names the kept logs; after teardown they are kept or removed."""
    report: pytest.TestReport = yield
    logs = item.stash.get(LOGS, None)
    if logs is None:
        return report
    if report.failed:
        item.stash[FAILED] = True
        report.sections.append(("pool logs", f"kept in {logs.dir}"))
    if report.when == "teardown":
        logs.finish(failed=item.stash.get(FAILED, False))
    return report


@pytest.fixture(autouse=True)
def no_execd_left(kept_logs: pool_logs.TestLogs,
                  running_pool: harness.RunningPool) -> Iterator[None]:  # fmt: skip
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
