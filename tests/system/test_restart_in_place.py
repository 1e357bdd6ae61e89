"""Restart in place (SIGUSR2, `execd restart`): same pid, new image, running jobs re-adopted."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd.daemon.client import ControlClient
from tests.component.daemon_harness import REPO, RunningDaemon, running_daemon
from tests.system.test_daemon_footprint import _children


@pytest.fixture
def node() -> Iterator[RunningDaemon]:
    with running_daemon(
        "NUM_CPUS = 2\nMEMORY = 2048\nMAXJOBRETIREMENTTIME = 0\nMachineMaxVacateTime = 5\n",
        prefix="execd-usr2-",
    ) as daemon:
        yield daemon


def socket_of(node: RunningDaemon) -> Path:
    return Path(node.execd("config-val", "RUN").stdout.strip()) / "execd.sock"


def test_sigusr2_keeps_the_pid_and_execd_job_gets_its_exit_code(
        node: RunningDaemon, fifo: Path) -> None:
    assert node.proc is not None
    waiting = subprocess.Popen(
        [sys.executable, "-m", "execd", "--config", str(node.config), "job", "--",
         "sh", "-c", f"read code < {fifo}; echo got $code; exit $code"],
        env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    spawned = node.wait_for("starter_spawned")
    with ControlClient(socket_of(node)) as c:
        fds_before = c.call("ping")["fds"]
    node.send(signal.SIGUSR2)
    node.wait_for("execd_stopped", how="restart")
    recovered = node.wait_for("recovery_done")
    assert recovered["adopted"] == 1
    assert recovered["orphans_removed"] == 0
    node.wait_for("execd_started")
    with ControlClient(socket_of(node)) as c:
        ping = c.call("ping")
        assert ping["pid"] == node.proc.pid  # the same process, a new image
        assert ping["fds"] <= fds_before  # nothing leaked through exec
        (job,) = c.call("who")["jobs"]
        assert job["starter_pid"] == spawned["pid"]
    with open(fifo, "w") as f:  # waits for the job to be reading
        f.write("6\n")
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 6, err
    assert out.strip() == "got 6"


def test_execd_restart_then_off_fast_still_kills_the_adopted_job(
        node: RunningDaemon, fifo: Path) -> None:
    assert node.proc is not None
    ad = {"Cmd": "/bin/sh", "Args": ["-c", f"read code < {fifo}"], "RequestCpus": 1,
          "RequestMemory": 64, "Iwd": "/tmp"}
    with ControlClient(socket_of(node)) as c:
        claim = c.call("request_claim", {"job": ad})
        job = c.call("activate", {"claim_id": claim["claim_id"], "job": ad})
    done = node.execd("restart")
    assert done.returncode == 0, done.stderr
    assert "1 running jobs re-adopted" in done.stdout
    assert node.proc.poll() is None
    with ControlClient(socket_of(node)) as c:
        assert [j["job_id"] for j in c.call("who")["jobs"]] == [job["job_id"]]
        # a claim granted by the new image (within the same second, maybe) is another one
        second = c.call("request_claim", {"job": ad})
        assert second["claim_id"].split("#")[:3] != claim["claim_id"].split("#")[:3]
        assert c.call("alive", {"claim_id": claim["claim_id"]})["slot"] == claim["slot"]
        c.call("release", {"claim_id": second["claim_id"]})
    off = node.execd("off", "-fast")
    assert off.returncode == 0, off.stderr
    finished = node.wait_for("job_finished", job=job["job_id"])
    assert finished["reason"] == "hard_killed"
    assert node.proc.wait(timeout=30) == 0
    assert node.wait_for("execd_stopped")["how"] == "fast"


def test_execd_restart_without_a_daemon_says_so(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    idle = RunningDaemon(tmp_path)
    done = idle.execd("restart")
    assert done.returncode == 4
    assert "not running" in done.stderr


def test_a_job_suspended_by_its_holder_is_still_suspended_after_a_restart(
        node: RunningDaemon, fifo: Path) -> None:
    ad = {"Cmd": "/bin/sh", "Args": ["-c", f"read code < {fifo}; exit $code"],
          "RequestCpus": 1, "RequestMemory": 64, "Iwd": "/tmp"}
    with ControlClient(socket_of(node)) as c:
        claim = c.call("request_claim", {"job": ad})
        job = c.call("activate", {"claim_id": claim["claim_id"], "job": ad})
        c.call("suspend", {"claim_id": claim["claim_id"]})
    node.send(signal.SIGUSR2)
    node.wait_for("execd_stopped", how="restart")
    node.wait_for("slot_restored", slot=claim["slot"], new="Claimed/Suspended")
    node.wait_for("execd_started")
    status = node.execd("status", "-af", "Name", "State", "Activity").stdout
    assert any(line.split()[1:] == ["Claimed", "Suspended"] for line in status.splitlines())
    with ControlClient(socket_of(node)) as c:
        assert c.call("continue", {"claim_id": claim["claim_id"]})["state"] == "Claimed/Busy"
        with open(fifo, "w") as f:  # only a thawed job can read it
            f.write("4\n")
        outcome = c.call("job_result", {"job_id": job["job_id"], "wait": True})
        assert outcome["report"]["ExitCode"] == 4
        c.call("release", {"claim_id": claim["claim_id"]})



def test_the_earlier_images_starter_zygote_is_reaped_at_a_restart(
        node: RunningDaemon) -> None:
    """The exec closes the zygote's pipes and it exits: the earlier image reaps it
    first. The new image has no handle on it, and it stayed a zombie until execd
    exited (one more each restart)."""
    assert node.proc is not None
    (earlier,) = [pid for pid, argv in _children(node.proc.pid) if "--zygote" in argv]
    node.send(signal.SIGUSR2)
    node.wait_for("execd_stopped", how="restart")
    node.wait_for("execd_started")
    children = _children(node.proc.pid)
    assert earlier not in [pid for pid, _argv in children]  # (a zombie included)
    assert len([pid for pid, argv in children if "--zygote" in argv]) == 1  # the new one
