"""A job being vacated when the daemon dies is still being vacated after the restart:
its slot comes back Preempting/Vacating (not Claimed/Busy), the soft kill goes on, and
the claim ends when the job has gone."""

from __future__ import annotations

import signal
import tempfile
import time
from pathlib import Path

import pytest

from execd.daemon.client import ControlClient
from execd.daemon.control import ControlError
from tests.component.daemon_harness import RunningDaemon


def slot_state(node: RunningDaemon, slot: str) -> str:
    for line in node.execd("status", "-af", "Name", "State", "Activity").stdout.splitlines():
        name, state, activity = line.split()
        if name.split("@")[0] == slot:
            return f"{state}/{activity}"
    return "deleted"


def wait_file(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():  # written by the job: no event of the daemon's to await
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def logged(node: RunningDaemon, name: str, timeout: float = 30, **match: object
           ) -> dict[str, object]:
    """An event of the daemon's log, whenever it came (before or after it served)."""
    deadline = time.monotonic() + timeout
    while True:
        for e in node.events():
            if e["event"] == name and all(e.get(k) == v for k, v in match.items()):
                return e
        assert time.monotonic() < deadline, f"no {name} {match} in the log"
        time.sleep(0.05)


def test_a_vacate_under_way_goes_on_after_kill_9_and_ends_the_claim() -> None:
    with tempfile.TemporaryDirectory(prefix="execd-evict-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        marks = root / "marks"
        marks.mkdir()
        marks.chmod(0o777)
        # The first SIGTERM is noted and survived; the second ends the job with 7.
        script = (f"n=0; trap 'n=$((n+1)); touch {marks}/term$n; [ $n -ge 2 ] && exit 7' TERM;"
                  f" touch {marks}/up; while :; do sleep 0.05; done")
        job = {"Cmd": "/bin/sh", "Args": ["-c", script], "RequestCpus": 1,
               "RequestMemory": 32, "Iwd": "/tmp"}
        node = RunningDaemon(root, "NUM_CPUS = 2\nMEMORY = 1024\nMAXJOBRETIREMENTTIME = 0\n"
                             "MachineMaxVacateTime = 600\n").start()
        try:
            sock = Path(node.execd("config-val", "RUN").stdout.strip()) / "execd.sock"
            with ControlClient(sock, timeout=60) as c:
                claim = c.call("request_claim", {"job": job})
                c.call("activate", {"claim_id": claim["claim_id"], "job": job})
                wait_file(marks / "up")
                c.call("vacate", {"claim_id": claim["claim_id"]})
            slot = claim["slot"]
            wait_file(marks / "term1")
            assert slot_state(node, slot) == "Preempting/Vacating"
            assert node.proc is not None
            node.proc.send_signal(signal.SIGKILL)
            node.proc.communicate(timeout=30)
            node.start()  # recovery is done once it serves
            (resumed,) = [e for e in node.events() if e["event"] == "eviction_resumed"]
            assert (resumed["slot"], resumed["how"]) == (slot, "vacating")
            # the starter exits once; its job ended by the soft kill resumed after restart
            assert logged(node, "job_finished", slot=slot)["exit_code"] == 7
            logged(node, "slot_state_changed", slot=slot, old="Preempting/Vacating")
            logged(node, "dynamic_slot_deleted", slot=slot)
            assert slot_state(node, slot) == "deleted"
            with ControlClient(sock, timeout=60) as c, pytest.raises(ControlError) as caught:
                c.call("alive", {"claim_id": claim["claim_id"]})
            assert caught.value.message == "unknown or stale claim id"
        finally:
            node.stop(signal.SIGQUIT)
