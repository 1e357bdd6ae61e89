"""A busy job's CPU shows up as its slot's CondorLoadAvg (from the job cgroup's cpu.stat)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.component.daemon_harness import RunningDaemon

BUSY = "while :; do :; done"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[RunningDaemon]:
    tmp_path.chmod(0o755)
    daemon = RunningDaemon(tmp_path, "NUM_CPUS = 2\nMEMORY = 1024\nPOLLING_INTERVAL = 1\n"
                                     "MAXJOBRETIREMENTTIME = 0\nMachineMaxVacateTime = 2\n")
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop(signal.SIGQUIT)


def loads(node: RunningDaemon) -> dict[str, list[float]]:
    """Name -> [CondorLoadAvg, LoadAvg, TotalCondorLoadAvg, TotalLoadAvg]."""
    done = node.execd("status", "-af", "Name", "CondorLoadAvg", "LoadAvg",
                      "TotalCondorLoadAvg", "TotalLoadAvg")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    return {row[0].split("@")[0]: [float(v) for v in row[1:]] for row in rows}


def test_busy_job_load_is_its_slots_condor_load(node: RunningDaemon) -> None:
    client = subprocess.Popen(
        [sys.executable, "-m", "execd", "--config", str(node.config), "job", "--", "sh", "-c",
         BUSY], env=node.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        node.wait_for("starter_spawned", slot="slot1_1")
        # The load is sampled every POLLING_INTERVAL while claimed; poll the published ads
        # (there is no event for "the load changed"). On this shared 2-core machine the
        # loop gets at least a quarter of a core.
        deadline = time.monotonic() + 60
        seen = loads(node)
        while seen.get("slot1_1", [0.0])[0] < 0.25 and time.monotonic() < deadline:
            time.sleep(0.5)
            seen = loads(node)
        condor, load, total_condor, total = seen["slot1_1"]
        assert condor >= 0.25, seen
        assert load >= condor  # LoadAvg = the slot's own job load plus any owner load
        assert seen["slot1"][0] == 0.0  # the partitionable slot runs nothing itself
        # TotalCondorLoadAvg is the sum over slots (sampled at the same pass as condor)
        assert total_condor == pytest.approx(sum(v[0] for v in seen.values()), abs=0.01)
        assert all(v[3] == total for v in seen.values())
    finally:
        client.kill()  # only the client: the daemon's SIGQUIT (fixture) kills the job
        client.wait(timeout=60)
