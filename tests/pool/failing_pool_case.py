"""Run only by test_pool_kept_logs.py (in a pytest of its own): one pool test that
passes and one that fails on purpose after starting an execd and then switching to the
pool with condor_startd (a pool restart, which wipes the daemons' logs). The name keeps
pytest from collecting it; run by hand without EXECD_POOL_LOGS_SELFTEST, both skip."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pool_harness as harness
import pytest
from pool_node import start_node

SELFTEST = "EXECD_POOL_LOGS_SELFTEST"


@pytest.fixture(autouse=True)
def only_as_selftest() -> None:
    if not os.environ.get(SELFTEST):
        pytest.skip(f"the harness's self-test (tests/pool/test_pool_kept_logs.py sets {SELFTEST})")


def test_passes(pool: harness.Pool) -> None:
    assert pool.status("-schedd")


def test_fails_after_starting_an_execd(running_pool: harness.RunningPool) -> None:
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp))
        assert node.running()
    assert running_pool.get(with_startd=True).status("-slots")  # start() waited for them
    raise AssertionError("this test fails on purpose")
