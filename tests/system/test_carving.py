"""A claim carves a d-slot from a partitionable slot only when the p-slot accepts it: the
p-slot's own state (Unclaimed or Matched) and its START for the request, as the policy
engine says. A p-slot in Owner or Backfill carves nothing and keeps its resources."""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd.daemon.client import ControlClient
from execd.daemon.control import ControlError
from tests.component.daemon_harness import RunningDaemon

JOB = {"Cmd": "/bin/true", "RequestCpus": 1, "RequestMemory": 32, "Iwd": "/tmp"}


@pytest.fixture
def root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="execd-carve-") as tmp:
        path = Path(tmp)
        path.chmod(0o755)
        yield path


def names_and_states(node: RunningDaemon) -> list[str]:
    out = node.execd("status", "-af", "Name", "State", "Activity", "Cpus").stdout
    return sorted(" ".join([line.split()[0].split("@")[0], *line.split()[1:]])
                  for line in out.splitlines())


def refusal(node: RunningDaemon, job: dict[str, object]) -> str:
    run = node.execd("config-val", "RUN").stdout.strip()
    with ControlClient(Path(run) / "execd.sock", timeout=60) as c, \
            pytest.raises(ControlError) as caught:
        c.call("request_claim", {"job": job, "slot": "slot1"})
    assert caught.value.code == "refused"
    return caught.value.message


def test_a_pslot_in_owner_carves_nothing(root: Path) -> None:
    node = RunningDaemon(root, "NUM_CPUS = 2\nMEMORY = 1024\nIS_OWNER = True\n").start()
    try:
        assert names_and_states(node) == ["slot1 Owner Idle 2"]
        assert refusal(node, JOB) == "claim refused: slot1 is Owner/Idle"
        assert names_and_states(node) == ["slot1 Owner Idle 2"]  # no d-slot, all CPUs
        assert not any(e["event"] == "claim_granted" for e in node.events())
    finally:
        node.stop(signal.SIGQUIT)


def test_a_pslot_whose_start_refuses_the_request_carves_nothing(root: Path) -> None:
    node = RunningDaemon(root, "NUM_CPUS = 2\nMEMORY = 1024\n"
                         "START = TARGET.Owner =?= \"coltrane\"\n").start()
    try:
        assert refusal(node, {**JOB, "Owner": "nobody"}) == \
            "claim refused: slot1: START is not true"
        assert names_and_states(node) == ["slot1 Unclaimed Idle 2"]
    finally:
        node.stop(signal.SIGQUIT)


def test_a_pslot_in_backfill_carves_nothing(root: Path) -> None:
    config = ("NUM_CPUS = 2\nMEMORY = 1024\nENABLE_BACKFILL = True\nSTART_BACKFILL = True\n"
              "BACKFILL_SYSTEM = TESTBF\nTESTBF_Executable = /bin/sleep\n"
              "TESTBF_Arguments = 600\nTESTBF_Owner = nobody\n")
    node = RunningDaemon(root, config).start()
    try:
        assert names_and_states(node) == ["slot1 Backfill Busy 2"]
        assert refusal(node, JOB) == "claim refused: slot1 is Backfill/Busy"
        assert names_and_states(node) == ["slot1 Backfill Busy 2"]
    finally:
        node.stop(signal.SIGQUIT)


def test_a_dslot_disk_is_rounded_to_the_pslots_disk_quantum(root: Path) -> None:
    # MODIFY_REQUEST_EXPR_REQUESTDISK's default reads Target.DiskQuantum: the p-slot's
    config = "NUM_CPUS = 2\nMEMORY = 1024\nDiskQuantum = 4096\nSTARTD_ATTRS = DiskQuantum\n"
    node = RunningDaemon(root, config).start()
    try:
        run = node.execd("config-val", "RUN").stdout.strip()
        with ControlClient(Path(run) / "execd.sock", timeout=60) as c:
            c.call("request_claim", {"job": {**JOB, "RequestDisk": 1000}, "slot": "slot1"})
        out = node.execd("status", "-af", "Name", "Disk").stdout.split()
        assert out[out.index(next(n for n in out if n.startswith("slot1_1@"))) + 1] == "4096"
    finally:
        node.stop(signal.SIGQUIT)
