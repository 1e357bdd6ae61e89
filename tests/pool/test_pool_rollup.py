"""A partitionable slot's roll-up of its dynamic slots in condor_status, on `execd run`
as on the pool's condor_startd 25.14.1 (Resource::publishDynamicChildSummaries).

Both execute points get one p-slot of 3 CPUs / 1024 MB with a custom resource
(`MACHINE_RESOURCE_Cogs = c1 c2 c3`) and `STARTD_PARTITIONABLE_SLOT_ATTRS = Arch,
NoSuchAttr`. Two jobs of different requests run one after the other, so the first gets
slot1_1 on both: 2 CPUs, 256 MB (200 quantized) and a cog; then 1 CPU, 128 MB, no cog.
Compared, idle and while both run: the p-slot's `PslotRollupInformation`,
`NumDynamicSlots` and every `Child<Attr>` list (names, order of the children, value forms:
JSON keeps strings, integers, reals and undefined apart), and each d-slot's `DSlotId`
and `PslotRollupInformation`. Values that legitimately differ are compared by form:
the host part of `ChildName`, `ChildEnteredCurrentState` (times) and `ChildDisk` (the
execute directories' free space). `[rollup-off]`: both with
`ADVERTISE_PSLOT_ROLLUP_INFORMATION = false` publish `NumDynamicSlots` alone.

Seen on condor_startd: the p-slot's roll-up reaches the collector in the same update as
the d-slots' new state (the same LastHeardFrom); execd advertises every slot at once on
a state change, so there too.
"""

from __future__ import annotations

import contextlib
import json
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from pool_node import PoolNode, start_node, wait_pool
from test_pool_jobs import PLAIN_SUBMIT, SLEEP_SCRIPT, submit_files
from test_pool_preemption import restart_startd

NODE = ("NUM_CPUS = 3\nMEMORY = 1024\nMACHINE_RESOURCE_Cogs = c1 c2 c3\n"
        "STARTD_PARTITIONABLE_SLOT_ATTRS = Arch, NoSuchAttr\n")  # fmt: skip
ROLLUP_OFF = "ADVERTISE_PSLOT_ROLLUP_INFORMATION = false\n"
REFERENCE_CONFIG = "/etc/condor/config.d/99-execd-rollup.conf"
# (submit extras, what the d-slot gets): the first job's d-slot is slot1_1 on both
JOBS = ("request_cpus = 2\nrequest_memory = 200\nrequest_cogs = 1", "request_cpus = 1")
# per child: what legitimately differs between the two execute points, kept by its form
BY_FORM = {
    "ChildName": lambda v: v.split("@")[0] + "@<host>" if isinstance(v, str) else v,
    "ChildEnteredCurrentState": lambda v: type(v).__name__,
    "ChildDisk": lambda v: type(v).__name__,
}


def rollup(ad: dict[str, Any]) -> dict[str, str]:
    """A slot's roll-up attributes, each as JSON text (undefined is null), by form where
    the value is the node's own."""
    keep = {"PslotRollupInformation", "NumDynamicSlots", "DSlotId", "SlotType"}
    out = {}
    for name, value in ad.items():
        if name in keep or name.startswith("Child"):
            formed = [BY_FORM[name](v) for v in value] \
                if name in BY_FORM and isinstance(value, list) else value
            out[name] = json.dumps(formed)
    return out


def slots_seen(slots: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {name.split("@")[0]: rollup(ad) for name, ad in slots.items()}


def run_jobs(pool: harness.Pool, node: PoolNode | None = None) -> tuple[Any, Any, Any]:
    """The slots' roll-up idle and while both jobs run, and then execd's own ads."""
    idle = wait_pool(pool, "the p-slot with its cogs", lambda s: len(s) == 1 and all(
        ad.get("TotalCogs") == 3 for ad in s.values()) and s)  # fmt: skip
    jobs: list[harness.SubmittedJob] = []
    busy: dict[str, Any] = {}
    try:
        for n, extra in enumerate(JOBS, start=1):
            jobs.append(submit_files(pool, PLAIN_SUBMIT.format(args="", extra=extra),
                                     {"job.sh": SLEEP_SCRIPT}))  # fmt: skip
            # every d-slot Busy, and the p-slot's ad updated with them (its roll-up, where
            # it publishes one, saying so too)
            busy = wait_pool(pool, f"{n} jobs running", lambda s, n=n: sum(
                ad.get("SlotType") == "Dynamic" and ad.get("Activity") == "Busy"
                for ad in s.values()) == n and all(
                ad.get("NumDynamicSlots") == n
                and ad.get("ChildActivity", ["Busy"] * n) == ["Busy"] * n
                for ad in s.values() if ad.get("SlotType") == "Partitionable") and s)  # fmt: skip
        shown = node.slots() if node is not None else None
        return slots_seen(idle), slots_seen(busy), shown
    finally:
        for job in jobs:
            pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


@contextlib.contextmanager
def reference_node(pool: harness.Pool, knob: str) -> Iterator[None]:
    """condor_startd restarted with execd's node, and back afterwards."""
    config = pool.host_path(REFERENCE_CONFIG)
    config.write_text(NODE + knob)
    try:
        restart_startd(pool, lambda ad: ad.get("TotalCogs") == 3)
        yield
    finally:
        config.unlink()
        restart_startd(pool, lambda ad: not ad.get("TotalCogs"))


@pytest.mark.parametrize("knob", ["", ROLLUP_OFF], ids=["rollup", "rollup-off"])
def test_pslot_rollup_of_running_dslots_as_on_condor_startd(
        running_pool: harness.RunningPool, knob: str) -> None:  # fmt: skip
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node: PoolNode = start_node(pool, Path(tmp),
                                    "STARTER_UPDATE_INTERVAL = 2\n" + NODE + knob)  # fmt: skip
        try:
            ours_idle, ours_busy, shown = run_jobs(pool, node)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_node(reference, knob):
        theirs_idle, theirs_busy, _ = run_jobs(reference)
    assert ours_idle == theirs_idle
    assert ours_busy == theirs_busy
    # `execd status` shows the roll-up the collector got
    assert slots_seen(shown) == ours_busy
    p = ours_busy["slot1"]
    if knob:  # NumDynamicSlots alone, on condor_startd too
        assert [k for ad in ours_busy.values() for k in ad if k not in ("SlotType", "DSlotId")
                ] == ["NumDynamicSlots"]  # fmt: skip
        return
    assert p["PslotRollupInformation"] == "true"
    assert p["ChildCpus"] == "[2, 1]" and p["ChildMemory"] == "[256, 128]"
    assert p["ChildCogs"] == "[1, 0]" and p["ChildNoSuchAttr"] == "[null, null]"
    assert p["ChildState"] == '["Claimed", "Claimed"]'
    assert json.loads(p["ChildRemoteUser"]) == [json.loads(p["ChildRemoteOwner"])[0]] * 2
    assert all("Child" + a in p for a in ("DSlotId", "CurrentRank", "AccountingGroup",
                                          "RetirementTimeRemaining", "GPUs", "Arch"))  # fmt: skip
