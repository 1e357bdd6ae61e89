"""A job's normal end goes the way condor_startd's does: the starter says the job has
exited (Claimed/Busy -> Claimed/Cleaning, transition 12) and cleans up; its exit then
ends Cleaning (Claimed/Idle, the claim ready for the next job)."""

from __future__ import annotations

import signal
import tempfile
from pathlib import Path

from execd.daemon.client import ControlClient
from tests.component.daemon_harness import RunningDaemon

JOB = {"Cmd": "/bin/sh", "Args": ["-c", "exit 3"], "RequestCpus": 1, "RequestMemory": 32,
       "Iwd": "/tmp"}


def test_job_exit_moves_the_slot_to_cleaning_before_the_starter_exits() -> None:
    with tempfile.TemporaryDirectory(prefix="execd-exit-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        node = RunningDaemon(root, "NUM_CPUS = 2\nMEMORY = 1024\n").start()
        try:
            run = node.execd("config-val", "RUN").stdout.strip()
            with ControlClient(Path(run) / "execd.sock", timeout=60) as c:
                claim = c.call("request_claim", {"job": JOB})
                for _ in range(2):  # and again on the reused claim
                    job = c.call("activate", {"claim_id": claim["claim_id"], "job": JOB})
                    out = c.call("job_result", {"job_id": job["job_id"], "wait": True,
                                                "ack": True})
                    assert out["report"]["ExitCode"] == 3
                    node.wait_for("slot_state_changed", slot=claim["slot"],
                                  old="Claimed/Cleaning", new="Claimed/Idle")
            events = [e for e in node.events() if e.get("slot") == claim["slot"] and e["event"]
                      in ("job_exited", "job_finished", "slot_state_changed")]
            seen = [(e["event"], e.get("trigger"), e.get("new")) for e in events]
            once = [
                ("slot_state_changed", "activate", "Claimed/Busy"),
                ("job_exited", None, None),  # the starter said so, still cleaning up
                ("slot_state_changed", "job_exited", "Claimed/Cleaning"),
                ("job_finished", None, None),  # the starter is gone: its report is read
                ("slot_state_changed", "starter_exited", "Claimed/Idle"),
            ]
            assert seen[1:] == once + once, seen
            assert [e["transition"] for e in events
                    if e.get("trigger") == "job_exited"] == ["12", "12"]
        finally:
            node.stop(signal.SIGQUIT)
