"""Claim verbs over the socket with a real daemon: suspend/continue, deactivate vs release,
match notification with MATCH_TIMEOUT, and the refusals, each with its reason."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execd.daemon.client import ControlClient
from execd.daemon.control import ControlError
from tests.component.daemon_harness import RunningDaemon


def start(root: Path, extra: str, *, partitionable: bool = True) -> RunningDaemon:
    root.chmod(0o755)
    daemon = RunningDaemon(root, extra)
    if not partitionable:
        text = daemon.config_text(extra).replace("use FEATURE : PartitionableSlot\n", "")
        daemon.config.write_text(text)
    return daemon.start()


@pytest.fixture
def node() -> Iterator[RunningDaemon]:
    with tempfile.TemporaryDirectory(prefix="execd-verbs-") as tmp:
        daemon = start(Path(tmp), "NUM_CPUS = 2\nMEMORY = 2048\nMAXJOBRETIREMENTTIME = 0\n"
                       "MachineMaxVacateTime = 5\n")
        try:
            yield daemon
        finally:
            daemon.stop(signal.SIGQUIT)


def client(node: RunningDaemon) -> ControlClient:
    run = node.execd("config-val", "RUN").stdout.strip()
    return ControlClient(Path(run) / "execd.sock", timeout=60)


def refused(c: ControlClient, verb: str, args: dict[str, Any]) -> str:
    with pytest.raises(ControlError) as caught:
        c.call(verb, args)
    assert caught.value.code == "refused", caught.value.message
    return caught.value.message


def slot_state(node: RunningDaemon, slot: str) -> str:
    out = node.execd("status", "-af", "Name", "State", "Activity").stdout
    for line in out.splitlines():
        name, state, activity = line.split()
        if name.split("@")[0] == slot:
            return f"{state}/{activity}"
    return "deleted"


def frozen(node: RunningDaemon, slot: str) -> str:
    path = node.cgroup_base / f"{slot}.slice" / "job" / "cgroup.events"
    if not path.exists():
        return "not yet made"  # the starter is still setting up
    events = path.read_text()
    return dict(line.split() for line in events.splitlines())["frozen"]


def until(predicate: Any, timeout: float = 15) -> None:
    """Poll a kernel file (cgroup.events) for the freezer's answer: nothing to await."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


SLEEPER = {"Cmd": "/bin/sh", "Args": ["-c", "trap 'exit 3' TERM; while :; do sleep 0.2; done"],
           "RequestCpus": 1, "RequestMemory": 64, "Iwd": "/tmp"}


def test_suspend_and_continue_freeze_and_thaw_the_job(node: RunningDaemon) -> None:
    with client(node) as c:
        claim = c.call("request_claim", {"job": SLEEPER})
        cid, slot = claim["claim_id"], claim["slot"]
        assert "no job runs" in refused(c, "suspend", {"claim_id": cid})
        c.call("activate", {"claim_id": cid, "job": SLEEPER})
        assert "not suspended" in refused(c, "continue", {"claim_id": cid})
        assert c.call("suspend", {"claim_id": cid})["state"] == "Claimed/Suspended"
        until(lambda: frozen(node, slot) == "1")
        assert node.execd("reconfig").returncode == 0  # a policy pass: CONTINUE is True,
        assert slot_state(node, slot) == "Claimed/Suspended"  # but the holder suspended it
        assert c.call("continue", {"claim_id": cid})["state"] == "Claimed/Busy"
        until(lambda: frozen(node, slot) == "0")
        other = cid[:-1] + ("1" if cid.endswith("0") else "0")  # one digit off, never equal
        assert "stale claim id" in refused(c, "suspend", {"claim_id": other})
        c.call("release", {"claim_id": cid})


@pytest.fixture
def fifos() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="execd-fifos-") as tmp:
        Path(tmp).chmod(0o755)
        yield Path(tmp)


def test_deactivate_ends_the_job_and_keeps_the_claim_release_ends_both(
        node: RunningDaemon, fifos: Path) -> None:
    ready = fifos / "ready"
    os.mkfifo(ready)
    ready.chmod(0o666)
    trapper = {**SLEEPER, "Args": ["-c", f"trap 'exit 3' TERM; echo up > {ready}; "
                                         "while :; do sleep 0.2; done"]}
    with client(node) as c:
        claim = c.call("request_claim", {"job": SLEEPER})
        cid, slot = claim["claim_id"], claim["slot"]
        first = c.call("activate", {"claim_id": cid, "job": trapper})
        assert ready.read_text() == "up\n"  # its trap is set (opening waits for the writer)
        c.call("suspend", {"claim_id": cid})  # deactivating a suspended job thaws it first
        c.call("deactivate", {"claim_id": cid})
        outcome = c.call("job_result", {"job_id": first["job_id"], "wait": True})
        assert outcome["report"]["ExitCode"] == 3  # its TERM trap ran
        node.wait_for("slot_state_changed", slot=slot, new="Claimed/Idle")
        assert slot_state(node, slot) == "Claimed/Idle"
        second = c.call("activate", {"claim_id": cid, "job": SLEEPER})  # the claim lives on
        assert second["slot"] == slot and second["job_id"] != first["job_id"]
        c.call("deactivate_forcefully", {"claim_id": cid})
        outcome = c.call("job_result", {"job_id": second["job_id"], "wait": True, "ack": True})
        assert outcome["report"]["ExitBySignal"] and outcome["report"]["ExitSignal"] == 9
        with pytest.raises(ControlError, match="already taken"):
            c.call("job_result", {"job_id": second["job_id"]})
        node.wait_for("slot_state_changed", slot=slot, new="Claimed/Idle")
        c.call("release", {"claim_id": cid})
        node.wait_for("dynamic_slot_deleted", slot=slot)
        assert "unknown or stale claim id" in refused(c, "activate",
                                                       {"claim_id": cid, "job": SLEEPER})


def test_match_then_claim_and_match_timeout_and_start_false_refusals(tmp_path: Path) -> None:
    node = start(tmp_path, "NUM_CPUS = 3\nMEMORY = 3072\nMATCH_TIMEOUT = 600\n"
                 "SLOT_TYPE_1 = cpus=1\nNUM_SLOTS_TYPE_1 = 3\nSLOT_TYPE_1_PARTITIONABLE = False\n",
                 partitionable=False)
    try:
        with client(node) as c:
            assert c.call("match", {"slot": "slot1"})["state"] == "Matched"
            assert slot_state(node, "slot1") == "Matched/Idle"
            assert c.call("request_claim", {"slot": "slot1", "job": SLEEPER})["slot"] == "slot1"
            assert slot_state(node, "slot1") == "Claimed/Idle"
            assert "Claimed/Idle" in refused(c, "match", {"slot": "slot1"})

            c.call("match", {"slot": "slot3"})
            with node.config.open("a") as f:
                f.write("START = False\n")
            assert node.execd("reconfig").returncode == 0
            node.wait_for("slot_state_changed", slot="slot3", trigger="start_false")
            why = refused(c, "request_claim", {"slot": "slot3", "job": SLEEPER})
            assert "START became false while Matched" in why

            with node.config.open("a") as f:
                f.write("START = True\nMATCH_TIMEOUT = 1\n")
            assert node.execd("reconfig").returncode == 0
            c.call("match", {"slot": "slot2"})
            node.wait_for("slot_state_changed", slot="slot2", trigger="match_timeout")
            why = refused(c, "request_claim", {"slot": "slot2", "job": SLEEPER})
            assert "match timed out (MATCH_TIMEOUT = 1s)" in why
    finally:
        node.stop(signal.SIGQUIT)


def test_match_on_a_partitionable_slot_is_refused(node: RunningDaemon) -> None:
    with client(node) as c:
        assert "partitionable" in refused(c, "match", {"slot": "slot1"})
        with pytest.raises(ControlError) as caught:
            c.call("match", {"slot": "slot9"})
        assert caught.value.code == "bad_args"
    assert os.path.exists(node.log)
