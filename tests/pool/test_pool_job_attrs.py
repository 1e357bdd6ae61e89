"""The job and claim attributes of a claimed slot, as condor_status -run, condor_who
and monitoring read them: a running job's d-slot (or static slot) on `execd run` has the
same ones as on the pool's own condor_startd (HTCondor 25.14.1), with equal values
where they come from the job, the claim or the pool, and plausible ones where they are
measurements (the job's pid a live process of the job, its starter's pid, memory);
`condor_who -addr` shows the job from the execute point's own answer.
Once the job has ended and its claim idles (keep_claim_idle), the job's attributes are
gone and the claim's stay, on both. The claim's secret is in no public ad nor the log.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NamedTuple

import pool_harness as harness
import pytest
from test_pool_daemon import WAIT_S, PoolNode
from test_pool_jobs import PLAIN_SUBMIT, held_claim_id, pool_node, submit_files
from test_pool_preemption import REFERENCE_NODE, RETIRE_MARK, RETIRE_SCRIPT, reference_config

from execd.claims.ids import parse_claim_id

# What condor_startd publishes on a claimed d-slot about its claim and job (and execd
# did not before): Claim::publish, SYSTEM_STARTD_JOB_ATTRS, the starter's updates.
JOB_ATTRS = (
    "JobId", "GlobalJobId", "ClientMachine", "RemoteScheddName", "RemoteNegotiatingGroup",
    "RemoteAutoregroup", "JobUniverse", "ImageSize", "ExecutableSize", "ResidentSetSize",
    "MemoryUsage", "DiskUsage", "CPUsUsage", "JobPid", "StarterPid", "NumPids",
    "PublicClaimId", "ClaimEndTime", "ScratchDirFileCount", "StdoutMtime", "StderrMtime",
)  # fmt: skip
# Equal on both execute points: from the job, the claim request, the match.
EQUAL = ("JobUniverse", "ExecutableSize", "ClientMachine", "RemoteScheddName",
         "RemoteNegotiatingGroup", "RemoteAutoregroup", "ClaimEndTime", "MemoryUsage")
# Present once the starter's first update arrived (STARTER_INITIAL_UPDATE_INTERVAL).
UPDATED = ("ResidentSetSize", "JobPid", "DiskUsage", "StdoutMtime", "StderrMtime")
KEEP_IDLE_S = 300  # the schedd keeps the claim this long after the job (keep_claim_idle)
STATIC_SLOT = "SLOT_TYPE_1_PARTITIONABLE = False\n"


class Layout(NamedTuple):
    slot_type: str  # of the job's slot
    slot: str  # its name on execd
    config: str  # execd's
    reference: Callable[[harness.Pool], AbstractContextManager[object]]  # condor_startd's


DYNAMIC = Layout("Dynamic", "slot1_1", "", lambda _pool: contextlib.nullcontext())
STATIC = Layout("Static", "slot1", STATIC_SLOT, lambda pool: reference_config(
    pool, "99-execd-job-attrs.conf", REFERENCE_NODE + STATIC_SLOT,
    lambda ad: ad.get("SlotType") == "Static"))  # fmt: skip


def job_slot(pool: harness.Pool, layout: Layout, probe: Any) -> dict[str, Any] | None:
    return next((ad for ad in pool.status("-slots")
                 if ad.get("SlotType") == layout.slot_type and probe(ad)), None)  # fmt: skip


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def observe(pool: harness.Pool, node: PoolNode | None, layout: Layout) -> dict[str, Any]:
    """A job runs until the test lets it end: its d-slot's attributes while it runs
    (checked for plausibility here) and once its claim idles after it."""
    token = f"{os.getpid()}-{pool._jobs}"
    marks = [Path(RETIRE_MARK.format(token=token)),
             pool.host_path(RETIRE_MARK.format(token=token))]  # fmt: skip
    extra = f"keep_claim_idle = {KEEP_IDLE_S}"
    job = submit_files(pool, PLAIN_SUBMIT.format(args=token, extra=extra),
                       {"job.sh": RETIRE_SCRIPT})  # fmt: skip
    try:
        job.wait_for_event("001", WAIT_S)
        running: dict[str, Any] = harness.wait_for(
            "the running job's slot with the starter's first update",
            lambda: job_slot(pool, layout, lambda ad: ad.get("Activity") == "Busy"
                          and all(a in ad for a in UPDATED)), WAIT_S, 0.5)  # fmt: skip
        others = [ad for ad in pool.status("-slots") if ad["Name"] != running["Name"]]
        (queued,) = pool.queue(f"{job.cluster}.0")
        assert running["JobId"] == f"{job.cluster}.0"
        assert running["GlobalJobId"] == queued["GlobalJobId"]
        # the job's pid is the running script (its argument is the token), as the
        # submitter's job or nobody; the starter's pid is the EP's starter for it
        assert token in cmdline(running["JobPid"]), running["JobPid"]
        if node is not None:
            spawned = node.wait_for("starter_spawned", slot=layout.slot)
            assert running["StarterPid"] == spawned["pid"]
        else:
            assert "condor_starter" in cmdline(running["StarterPid"])
        assert running["NumPids"] >= 1
        assert running["ImageSize"] > 0 and running["ResidentSetSize"] > 0
        assert isinstance(running["CPUsUsage"], float) and running["CPUsUsage"] >= 0
        assert running["DiskUsage"] > 0 and running["ScratchDirFileCount"] >= 2
        assert running["JobStart"] - 5 <= running["StdoutMtime"] <= running["MyCurrentTime"]
        assert running["JobStart"] - 5 <= running["StderrMtime"] <= running["MyCurrentTime"]
        # MemoryUsage is an expression over ResidentSetSize; it evaluates to an integer
        ((memory, rss),) = pool.status_af("MemoryUsage", "ResidentSetSize",
                                          what=running["Name"])  # fmt: skip
        assert int(memory) == (int(rss) + 1023) // 1024
        # condor_who asks the execute point itself (QUERY_STARTD_ADS) and shows the job
        who = pool.tool("condor_who", "-addr", running["MyAddress"]).check().stdout
        # (condor_startd 25.14.1 lists its job twice; execd once)
        found = {tuple(line.split()) for line in who.splitlines()
                 if line.startswith(running["RemoteUser"])}  # fmt: skip
        assert len(found) == 1, who
        row = list(found.pop())
        slot_number = running["Name"].split("@")[0].removeprefix("slot")
        assert row[:4] == [running["RemoteUser"], running["ClientMachine"], slot_number,
                           running["JobId"]], who  # fmt: skip
        assert int(row[5]) == running["JobPid"], who
        # condor_status -direct: the EP's own answer, its constraint and projection applied
        direct = pool.tool("condor_status", "-direct", running["MyAddress"], "-constraint",
                           "JobId =!= undefined", "-af", "Name", "JobId").check().stdout
        assert direct.split() == [running["Name"], running["JobId"]], direct
        # the claim id without its secret
        public = running["PublicClaimId"]
        assert re.fullmatch(r"<[^>]+>#\d+#\d+#\.\.\.", public), public
        assert public.startswith(running["MyAddress"])
        secret = ""
        if node is not None:
            held = held_claim_id(node, layout.slot)
            secret = parse_claim_id(held).secret
            assert public == held.rsplit("#", 1)[0] + "#..."
            assert secret not in pool.tool("condor_status", "-l").check().stdout
            assert secret not in node.log.read_text()

        for mark in marks:
            mark.touch()
        job.wait_for_event("005", WAIT_S)
        idle: dict[str, Any] = harness.wait_for("the job's claim idle", lambda: job_slot(
            pool, layout, lambda ad: (ad.get("State"), ad.get("Activity")) == ("Claimed", "Idle")),
            WAIT_S, 0.5)  # fmt: skip
        if node is not None:
            assert secret not in node.log.read_text()
        return {
            "running": sorted(a for a in JOB_ATTRS if a in running),
            "equal": {a: running[a] for a in EQUAL},
            # the p-slot beside the d-slot: NumPids = 0, as on every unclaimed slot
            "other slots": sorted({(a, ad[a]) for ad in others for a in JOB_ATTRS if a in ad}),
            "idle": sorted(a for a in JOB_ATTRS if a in idle),
            "idle equal": {a: idle.get(a) for a in EQUAL},
        }
    finally:
        for mark in marks:
            mark.unlink(missing_ok=True)
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


@pytest.mark.parametrize("layout", [DYNAMIC, STATIC], ids=["dynamic", "static"])
def test_a_running_jobs_slot_has_condor_startds_job_and_claim_attributes(
        running_pool: harness.RunningPool, layout: Layout) -> None:  # fmt: skip
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp, layout.config)
        try:
            ours = observe(pool, node, layout)
        finally:
            node.stop(signal.SIGQUIT)
    condor = running_pool.get(with_startd=True)
    with layout.reference(condor):
        theirs = observe(condor, None, layout)
    assert ours == theirs
    assert ours["running"] == sorted(JOB_ATTRS)
    assert ours["equal"]["JobUniverse"] == 5
    assert ours["equal"]["RemoteNegotiatingGroup"] == "<none>"
    assert ours["other slots"] == ([("NumPids", 0)] if layout == DYNAMIC else [])
