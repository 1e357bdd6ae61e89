"""A failing pool test keeps its logs where its failure report says (pool_logs.py): a
pytest of its own runs failing_pool_case.py against the real pool, one test passing
and one failing after starting an execd and switching to the pool with condor_startd,
and leaves the failing one's directory only: its execd's whole log, and the HTCondor
daemons' logs of both pools from where they stood as the test began (the first pool's
copied before the second one's start wiped them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pool_harness as harness
import pool_logs
from failing_pool_case import SELFTEST

HERE = Path(__file__).parent
REPO = HERE.parents[1]
RUN_TIMEOUT_S = 300


def test_a_failing_pool_tests_logs_are_kept_and_named(running_pool: harness.RunningPool,
                                                      tmp_path: Path) -> None:  # fmt: skip
    running_pool.close()  # one pool per chroot: the inner run starts its own
    kept = tmp_path / "kept"
    env = os.environ | {pool_logs.ROOT_ENV: str(kept), SELFTEST: "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--basetemp={tmp_path / 'inner'}", str(HERE / "failing_pool_case.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "1 failed, 1 passed" in out, out
    # the passing test's directory is gone, the failing one's stays and is named
    (kept_dir,) = kept.iterdir()
    assert kept_dir.name == "failing_pool_case-test_fails_after_starting_an_execd"
    assert f"kept in {kept_dir}" in out.split("this test fails on purpose", 1)[1], out
    assert sorted(p.name for p in kept_dir.iterdir()) == ["condor-1", "condor-2", "execd-1"]
    # the execd's log outlived its root (a temporary directory the test removed)
    events = [json.loads(line)["event"]
              for line in (kept_dir / "execd-1" / "ExecdLog").read_text().splitlines()]
    assert "pool_joined" in events and events[-1] == "execd_stopped", events
    daemons = {"MasterLog", "CollectorLog", "NegotiatorLog", "SchedLog", "SharedPortLog",
               "master.stdout", "POOL"}  # fmt: skip
    # the pool without a startd, started by the passing test: from the failing test's
    # start (no start-up) to its shutdown as the test switched pools
    first = kept_dir / "condor-1"
    assert daemons <= {p.name for p in first.iterdir()} and not (first / "StartLog").exists()
    master = (first / "MasterLog").read_text()
    assert "STARTING UP" not in master and "EXITING WITH STATUS 0" in master, master
    assert (first / "CollectorLog").read_text(), "the collector logged nothing as execd joined"
    # the pool with condor_startd, started in the failing test: whole, StartLog too
    second = kept_dir / "condor-2"
    assert daemons | {"StartLog"} <= {p.name for p in second.iterdir()}
    assert "STARTING UP" in (second / "MasterLog").read_text()
