"""Single-node jobs through a real daemon: claim, activate, starter, outcome, d-slots."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd.cgroups.discovery import discover
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import CgroupTree
from tests.component.daemon_harness import REPO, RunningDaemon


@pytest.fixture
def node() -> Iterator[RunningDaemon]:
    base = f"execd-test-{os.getpid()}-{secrets.token_hex(4)}"
    with tempfile.TemporaryDirectory(prefix="execd-node-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        daemon = RunningDaemon(
                root,
            f"BASE_CGROUP = {base}\nNUM_CPUS = 2\nMEMORY = 2048\nMAXJOBRETIREMENTTIME = 0\n"
            "MachineMaxVacateTime = 5\n",
        ).start()
        try:
            yield daemon
        finally:
            daemon.stop(signal.SIGQUIT)
            # the daemon moved itself into the tree; it is gone now, so the tree can go
            CgroupTree(CgroupFS(), discover(CgroupFS()), base).remove()


def job(node: RunningDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    return node.execd("job", *args, timeout=60)


def test_job_output_exit_code_user_and_cgroup(node: RunningDaemon) -> None:
    script = "id -un; grep '^0::' /proc/self/cgroup; echo oops >&2; exit 7"
    done = job(node, "--", "sh", "-c", script)
    assert done.returncode == 7, done.stderr
    user, cgroup = done.stdout.split()
    assert user == "nobody"
    assert cgroup.startswith("0::/execd-test-")
    assert cgroup.endswith("/slot1_1.slice/job")
    assert "oops" in done.stderr
    finished = node.wait_for("job_finished")
    assert finished["exit_code"] == 7
    node.wait_for("dynamic_slot_deleted", slot="slot1_1")
    status = node.execd("status", "-af", "Name", "Cpus", "Memory")
    (row,) = [line.split() for line in status.stdout.splitlines()]
    assert row[0].startswith("slot1@")
    assert row[1:] == ["2", "2048"]  # the d-slot's resources came back


def test_signal_death_is_128_plus_signal(node: RunningDaemon) -> None:
    done = job(node, "--", "sh", "-c", "kill -TERM $$")
    assert done.returncode == 128 + signal.SIGTERM


def test_request_larger_than_the_node_is_refused_naming_the_resource(node: RunningDaemon) -> None:
    done = job(node, "--cpus", "64", "--", "true")
    assert done.returncode == 123
    assert "Cpus" in done.stderr
    status = node.execd("status", "-af", "Name")
    assert len(status.stdout.split()) == 1  # nothing carved


def test_d_slot_is_carved_with_the_request(node: RunningDaemon) -> None:
    done = job(node, "--cpus", "2", "--memory", "300", "--", "sh", "-c", "echo $OMP_NUM_THREADS")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"
    claimed = [e for e in node.events() if e["event"] == "slot_state_changed"
               and e.get("new") == "Claimed/Idle"]
    assert claimed[0]["slot"] == "slot1_1"


def test_start_false_refuses_the_claim(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    daemon = RunningDaemon(tmp_path, "START = False\n").start()
    try:
        done = daemon.execd("job", "--", "true", timeout=60)
        assert done.returncode == 123
        assert "START is not true" in done.stderr
    finally:
        daemon.stop(signal.SIGQUIT)


def test_graceful_shutdown_vacates_a_running_job(node: RunningDaemon) -> None:
    env = node.env()
    waiting = subprocess.Popen(
        [sys.executable, "-m", "execd", "--config", str(node.config), "job", "--",
         "sh", "-c",
         "trap 'echo got TERM; exit 3' TERM; echo started; while :; do sleep 0.1; done"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    node.wait_for("starter_spawned")
    assert waiting.stdout is not None
    assert waiting.stdout.readline().strip() == "started"
    node.send(signal.SIGTERM)
    out, _err = waiting.communicate(timeout=60)
    assert "got TERM" in out
    assert waiting.returncode == 3
    assert node.proc is not None
    assert node.proc.wait(timeout=30) == 0  # the daemon exits once its job is gone
    assert node.wait_for("execd_stopped")["how"] == "graceful"


def test_a_job_sees_only_the_gpus_of_its_dynamic_slot(tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES names the d-slot's AssignedGPUs and nothing else (found on the
    H100 machine: the job saw none while the d-slot held the GPU)."""
    tmp_path.chmod(0o755)
    base = f"execd-test-{os.getpid()}-{secrets.token_hex(4)}"
    daemon = RunningDaemon(
        tmp_path,
        f"BASE_CGROUP = {base}\nNUM_CPUS = 2\nMEMORY = 2048\n"
        "MACHINE_RESOURCE_GPUs = GPU-aaaa1111, GPU-bbbb2222\n",
    ).start()
    show = "echo gpus=$CUDA_VISIBLE_DEVICES assigned=$_CONDOR_AssignedGPUs"
    try:
        one = daemon.execd("job", "--gpus", "1", "--", "sh", "-c", show, timeout=60)
        assert one.returncode == 0, one.stderr
        assert one.stdout.split() == ["gpus=GPU-aaaa1111", "assigned=GPU-aaaa1111"]
        both = daemon.execd("job", "--gpus", "2", "--", "sh", "-c", show, timeout=60)
        assert both.stdout.split() == ["gpus=GPU-aaaa1111,GPU-bbbb2222",
                                       "assigned=GPU-aaaa1111,GPU-bbbb2222"]
        none = daemon.execd("job", "--", "sh", "-c", show, timeout=60)
        # none: condor_starter's ENVIRONMENT_VALUE_FOR_UnAssignedGPUs
        assert none.stdout.split() == ["gpus=10000", "assigned=10000"]
    finally:
        daemon.stop(signal.SIGQUIT)
        CgroupTree(CgroupFS(), discover(CgroupFS()), base).remove()
