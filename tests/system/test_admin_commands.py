"""execd drain / vacate / off / who against a real daemon with a running job."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.component.daemon_harness import REPO, RunningDaemon, running_daemon

LONG_JOB = "trap 'echo got TERM; exit 3' TERM; echo started; while :; do sleep 0.1; done"


@pytest.fixture
def node() -> Iterator[RunningDaemon]:
    with running_daemon(
        "NUM_CPUS = 2\nMAXJOBRETIREMENTTIME = 0\nMachineMaxVacateTime = 5\n",
        prefix="execd-node-",
    ) as daemon:
        yield daemon


def start_job(node: RunningDaemon) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "execd", "--config", str(node.config), "job", "--",
         "sh", "-c", LONG_JOB],
        env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    return proc


def test_who_lists_the_running_job(node: RunningDaemon) -> None:
    job = start_job(node)
    done = node.execd("who")
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()
    assert rows[0].split() == ["SLOT", "JOB", "OWNER", "STARTER", "CPU_S", "MEM_MB", "PROCS",
                               "CGROUP"]
    slot, _job_id, owner, pid, cpu, memory, procs, cgroup = rows[1].split()
    assert slot == "slot1_1"
    assert owner == "root"
    assert int(pid) > 0
    assert float(cpu) >= 0 and float(memory) > 0
    assert int(procs) >= 1  # the shell, and maybe its sleep
    assert cgroup == str(node.cgroup_base / "slot1_1.slice")
    node.execd("vacate", "-fast")
    job.communicate(timeout=60)


def test_graceful_drain_without_retirement_evicts_and_drains(node: RunningDaemon) -> None:
    job = start_job(node)
    done = node.execd("drain", "-graceful", "-reason", "kernel upgrade")
    assert done.returncode == 0, done.stderr
    out, _ = job.communicate(timeout=60)
    assert "got TERM" in out
    node.wait_for("slot_state_changed", slot="slot1", new="Drained/Idle", timeout=30)
    status = node.execd("status", "-af", "Name", "State", "DrainReason")
    assert status.stdout.split()[1:] == ["Drained", "kernel", "upgrade"]
    refused = node.execd("job", "--", "true")
    assert refused.returncode == 123
    assert node.execd("drain", "-cancel").returncode == 0
    node.wait_for("slot_state_changed", slot="slot1", new="Unclaimed/Idle", timeout=30)


def test_vacate_one_slot(node: RunningDaemon) -> None:
    job = start_job(node)
    done = node.execd("vacate", "slot1_1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "slot1_1"
    out, _ = job.communicate(timeout=60)
    assert "got TERM" in out
    assert node.execd("vacate", "slot9").returncode == 1


def test_off_fast_kills_jobs_and_stops(node: RunningDaemon) -> None:
    job = start_job(node)
    assert node.execd("off", "-fast").returncode == 0
    _out, err = job.communicate(timeout=60)
    assert job.returncode == 124, err  # execd job's code for an evicted job
    assert "evicted" in err
    assert node.proc is not None
    assert node.proc.wait(timeout=30) == 0


def test_commands_without_a_daemon_exit_4(tmp_path: Path) -> None:
    idle = RunningDaemon(tmp_path)
    for args in (["drain"], ["vacate"], ["off"], ["who"], ["reconfig"]):
        done = idle.execd(*args)
        assert done.returncode == 4, args
        assert "not running" in done.stderr


def test_drain_start_expression_lets_scavenging_jobs_run_until_old_jobs_end() -> None:
    with tempfile.TemporaryDirectory(prefix="execd-node-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        node = RunningDaemon(root, "NUM_CPUS = 2\nMAXJOBRETIREMENTTIME = 600\n"
                                   "MachineMaxVacateTime = 5\n").start()
        old = None
        try:
            old = start_job(node)
            refused = node.execd("drain", "-quick", "-start", "True")
            assert refused.returncode != 0 and "graceful" in refused.stderr
            done = node.execd("drain", "-graceful", "-start", "TARGET.Scavenger =?= true")
            assert done.returncode == 0, done.stderr
            node.wait_for("slot_state_changed", slot="slot1_1", new="Claimed/Retiring")
            assert node.execd("job", "--", "true").returncode == 123  # START is the drain's
            scavenger = node.execd("job", "--attr", "Scavenger=true", "--", "true")
            assert scavenger.returncode == 0, scavenger.stderr
            # a graceful vacate would let it retire on (as condor_startd's): end it fast
            assert node.execd("vacate", "-fast", "slot1_1").returncode == 0
            out, _ = old.communicate(timeout=60)
            assert "got TERM" not in out and old.returncode != 0, out
            node.wait_for("drain_scavenging_over")
            node.wait_for("slot_state_changed", slot="slot1", new="Drained/Idle", timeout=30)
        finally:
            node.stop(signal.SIGQUIT)
            if old is not None and old.poll() is None:
                old.kill()
                old.communicate()
