"""A broken d-slot is still broken after kill -9 and a restart while its cgroup holds a
process: still advertised with its SlotBrokenReason, and its resources still out of the
partitionable slot. Once that process is gone, a restart clears the mark.

Real daemon, real starter and job. A process that SIGKILL cannot end cannot be made on
demand here, so the broken state comes the way the daemon learns it: the starter's
durable report names SlotBrokenReason (tests/component/test_starter_broken_slot.py shows
the starter writing it). The daemon is stopped (SIGSTOP) while the job ends, the report
gets the reason, and the daemon carries on and reads it. What could not be killed is a
process the test puts in the slot's cgroup (the daemon leaves a broken slot's cgroup be).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execd.daemon.client import ControlClient
from execd.daemon.control import ControlError
from tests.component.daemon_harness import RunningDaemon, running_daemon

REASON = "slot1_1.slice still holds 1 processes after 5.0s"


@pytest.fixture
def node() -> Iterator[RunningDaemon]:
    with running_daemon("NUM_CPUS = 4\nMEMORY = 1024\nMAXJOBRETIREMENTTIME = 0\n",
                        prefix="execd-broken-") as daemon:
        yield daemon


def client(node: RunningDaemon) -> ControlClient:
    run = node.execd("config-val", "RUN").stdout.strip()
    return ControlClient(Path(run) / "execd.sock", timeout=60)


def slot_ads(node: RunningDaemon) -> dict[str, dict[str, Any]]:
    with client(node) as c:
        ads = c.call("status")["ads"]
    return {str(ad["Name"]).split("@")[0]: ad for ad in ads}


def await_exit(pid: int, timeout: float = 30) -> None:
    fd = os.pidfd_open(pid)
    try:
        assert select.select([fd], [], [], timeout)[0], f"starter {pid} did not exit"
    finally:
        os.close(fd)


def assert_broken(node: RunningDaemon) -> None:
    ads = slot_ads(node)
    broken = ads["slot1_1"]
    assert broken["SlotBrokenReason"] == REASON
    assert (broken["State"], broken["Cpus"], broken["Start"]) == ("Owner", 1, False)
    assert ads["slot1"]["Cpus"] == 3  # its CPU is not offered again
    assert ads["slot1"]["SlotBrokenReason"] == f"slot1_1: {REASON}"
    with client(node) as c, pytest.raises(ControlError, match="3 Cpus are left"):
        c.call("request_claim", {"job": {"RequestCpus": 4, "RequestMemory": 64}})


def test_a_broken_dslot_stays_broken_after_kill_9_and_restart(
        node: RunningDaemon) -> None:
    fifo = node.root / "release"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    job = {"Cmd": "/bin/sh", "Args": ["-c", f"read x < {fifo}"], "RequestCpus": 1,
           "RequestMemory": 64, "Iwd": "/tmp"}
    with client(node) as c:
        claim = c.call("request_claim", {"job": job})
        assert claim["slot"] == "slot1_1"
        started = c.call("activate", {"claim_id": claim["claim_id"], "job": job})
        (running,) = c.call("who")["jobs"]
    node.wait_for("starter_spawned", slot="slot1_1")

    node.send(signal.SIGSTOP)  # the job ends while the daemon cannot look
    with open(fifo, "w") as f:
        f.write("done\n")
    await_exit(running["starter_pid"])
    report_path = node.root / "state" / "spool" / "jobs" / started["job_id"] / "report.json"
    report = json.loads(report_path.read_text())
    report_path.write_text(json.dumps({**report, "SlotBrokenReason": REASON}))
    node.send(signal.SIGCONT)
    node.wait_for("job_finished", slot="slot1_1")
    with client(node) as c:
        c.call("release", {"claim_id": claim["claim_id"]})
    node.wait_for("broken_dynamic_slot_kept", slot="slot1_1")
    assert_broken(node)
    leaf = node.cgroup_base / "slot1_1.slice" / "job"
    leaf.mkdir(parents=True)
    leftover = subprocess.Popen(["sleep", "300"])
    (leaf / "cgroup.procs").write_text(str(leftover.pid))

    assert node.proc is not None
    node.proc.send_signal(signal.SIGKILL)
    node.proc.communicate(timeout=30)
    node.start()
    assert_broken(node)
    restored = [e for e in node.events() if e["event"] == "recovery_done"][-1]
    assert (restored["claims"], restored["broken"]) == (0, 2)  # slot1_1 and its slot1
    assert leftover.poll() is None  # a broken slot's cgroup is left alone

    # The leftover dies at last: a restart (in place) clears both marks, gives the
    # CPU back and removes the empty cgroup; the marks do not come back after that.
    leftover.kill()
    leftover.wait(timeout=30)
    assert node.execd("restart").returncode == 0
    node.wait_for("broken_slot_cleared", slot="slot1_1")
    node.wait_for("broken_slot_cleared", slot="slot1")
    node.wait_for("execd_started")
    ads = slot_ads(node)
    assert "slot1_1" not in ads
    assert (ads["slot1"]["Cpus"], ads["slot1"].get("SlotBrokenReason")) == (4, None)
    assert not (node.cgroup_base / "slot1_1.slice").exists()
    with client(node) as c:
        again = c.call("request_claim", {"job": {"RequestCpus": 4, "RequestMemory": 64}})
        c.call("release", {"claim_id": again["claim_id"]})
    restarted = [e for e in node.events() if e["event"] == "recovery_done"][-1]
    assert restarted["broken"] == 0
