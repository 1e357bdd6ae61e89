"""bench/bench_pool.py --check: the same few jobs on condor_startd and on execd, in one
pool, end with the same exit codes, stdout, stderr and result files.

The bench starts its own pool in the chroot (the slot layout is its own), so the
session's pool is stopped first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pool_harness as harness

REPO = Path(__file__).resolve().parents[2]


def test_check_mode_same_results_on_condor_startd_and_execd(
    running_pool: harness.RunningPool, tmp_path: Path
) -> None:
    running_pool.close()  # one pool per chroot at a time
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_pool.py"), "--check", "--stall", "30",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert out.exists(), done.stdout + done.stderr
    result = json.loads(out.read_text())
    condor, execd = result["halves"]
    assert condor["ep"] == "condor_startd" and execd["ep"] == "execd"
    assert condor["error"] is None and condor["completed"] == 4, done.stdout
    assert condor["peak_jobs"] >= 1 and condor["peak_pss_kb"] > condor["idle_pss_kb"]
    assert execd["error"] is None and execd["completed"] == 4, done.stdout
    assert result["identical"] is True, done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
