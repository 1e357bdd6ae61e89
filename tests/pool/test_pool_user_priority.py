"""User-priority (fair-share) preemption by the real negotiator, compared with
condor_startd 25.14.1.

The negotiator is configured to preempt for priority (PREEMPTION_REQUIREMENTS, False by
default, here the manual's `RemoteUserPrio > SubmitterUserPrio * 1.2`), and the pool's
ordinary submitter (execdtest) is given a priority factor a thousand times worse than
execdrank's (condor_userprio -setfactor). execdtest's job runs; execdrank submits. The
slot ranks both jobs alike (RANK 0): the negotiator matches execdrank's job "preempting"
execdtest, and hands its schedd the slot's preempting claim id. condor_startd accepts
such a claim of an equal RANK ("preempting claim based on user priority") and counts it
in JobUserPrioPreemptions; so does execd: the running job is evicted (004, requeued
Idle), the slot passes through Preempting to the new claim, and execdrank's job runs —
the same user-log events, states and counters on both execute points. The other way
round the negotiator does not preempt (execdrank's priority is the better one), so the
evicted job stays Idle. On a static slot, on a dynamic slot of the default p-slot, and
with an hour of retirement (MAXJOBRETIREMENTTIME; a negotiator that considers early
preemption), where the running job retires for the new claim and ends on its own; and
there, a third submitter (execdprio) better still, whose claim takes the place of the
waiting one (condor_startd's preempting preempting claim).
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from pool_node import WAIT_S, PoolNode, start_node
from test_pool_daemon_attrs import startd_counters
from test_pool_jobs import PLAIN_SUBMIT, submit_files, timeless
from test_pool_preemption import (
    REFERENCE_NODE,
    RETIRE_MARK,
    RETIRE_SCRIPT,
    SLEEP,
    Layout,
    claimant,
    early_preemption,
    execd_moves,
    job_status,
    preempted_by,
    reference_config,
    slot_ad,
    startd_moves,
)

BETTER = "execdrank"  # the user of far better priority
PRIORITY_CONFIG = "97-execd-user-priority-preemption.conf"
# the manual's example: preempt for a user whose priority is 20 % better
PREEMPTION_REQUIREMENTS = "RemoteUserPrio > SubmitterUserPrio * 1.2"
# condor_startd configured as execd's node (one slot of 2 CPUs / 1024 MB), RANK left 0
REFERENCE_CONFIG = "99-execd-user-priority.conf"
WORSE_FACTOR = 1_000_000.0  # execdtest's; execdrank keeps the default (1000)


@contextlib.contextmanager
def priority_preemption(pool: harness.Pool, best: str | None = None) -> Iterator[None]:
    """The negotiator preempts for user priority, and execdtest's priority factor makes
    it far worse than execdrank's (and `best`'s, at the lowest factor, 1, better still);
    undone afterwards."""
    config = pool.host_path(f"/etc/condor/config.d/{PRIORITY_CONFIG}")
    config.write_text(f"PREEMPTION_REQUIREMENTS = {PREEMPTION_REQUIREMENTS}\n")
    domain = pool.tool("condor_config_val", "UID_DOMAIN").check().stdout.strip()
    factors = {harness.SUBMITTER: WORSE_FACTOR, **({best: 1.0} if best else {})}
    default = pool.tool("condor_config_val", "-negotiator", "DEFAULT_PRIO_FACTOR"
                        ).check().stdout.strip()  # fmt: skip
    try:
        negotiator_requirements(pool, PREEMPTION_REQUIREMENTS)
        for user, factor in factors.items():
            pool.tool("condor_userprio", "-setfactor", f"{user}@{domain}", str(factor)).check()
        yield
    finally:
        config.unlink(missing_ok=True)
        for user in factors:
            pool.tool("condor_userprio", "-setfactor", f"{user}@{domain}", default).check()
        negotiator_requirements(pool, "false")


def negotiator_requirements(pool: harness.Pool, expected: str) -> None:
    """condor_reconfig, then the running negotiator's own PREEMPTION_REQUIREMENTS."""
    pool.tool("condor_reconfig", "-negotiator").check()
    harness.wait_for(f"the negotiator's PREEMPTION_REQUIREMENTS {expected!r}",
                     lambda: pool.tool("condor_config_val", "-negotiator",
                                       "PREEMPTION_REQUIREMENTS").stdout.strip().lower()
                     == expected.lower(), WAIT_S, 0.2)  # fmt: skip


def preempted_for_priority(pool: harness.Pool, node: PoolNode | None,
                           layout: Layout) -> tuple[Any, ...]:  # fmt: skip
    """execdtest's job runs in layout.slot; execdrank's (the same RANK, a far better
    priority) preempts it: what users see, as test_pool_preemption's rank case."""
    return preempted_by(pool, node, layout, by=BETTER, rank=0.0, basis="user priority")


LAYOUTS = {
    # a static slot; the same on condor_startd
    "static": ("SLOT_TYPE_1_PARTITIONABLE = False\n", "slot1", ""),
    # the default p-slot: execdtest's job takes all of it (2 CPUs), so execdrank's fits
    # nowhere but in its d-slot, which the negotiator preempts as a static slot
    "dynamic": ("SLOT_TYPE_1_PARTITIONABLE = True\n", "slot1_1", "request_cpus = 2"),
    # an hour of retirement (and a negotiator that preempts slots with retirement left):
    # the first job retires for the new claim and is let end
    "retiring": ("SLOT_TYPE_1_PARTITIONABLE = False\nMAXJOBRETIREMENTTIME = 3600\n",
                 "slot1", ""),
}


@contextlib.contextmanager
def retirement_preemption(pool: harness.Pool, retiring: bool) -> Iterator[None]:
    with early_preemption(pool) if retiring else contextlib.nullcontext():
        yield


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_better_priority_user_preempts_a_running_job_as_on_condor_startd(
        running_pool: harness.RunningPool, layout: str) -> None:  # fmt: skip
    """execdtest's job runs; execdrank's (equal RANK, far better priority) takes the
    slot from it: 004 and Idle for the first, 001 and Claimed/Busy with RemoteOwner
    execdrank@... for the second, the slot's states and the startd's counters
    (JobUserPrioPreemptions 1, JobRankPreemptions 0) as on condor_startd."""
    execd, slot, low_extra = LAYOUTS[layout]
    retiring = layout == "retiring"
    kind = "Partitionable" if slot != "slot1" else "Static"
    where = Layout(execd, slot, low_extra)
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp, \
            priority_preemption(pool), retirement_preemption(pool, retiring):  # fmt: skip
        node = start_node(pool, Path(tmp), "STARTER_UPDATE_INTERVAL = 2\n" + execd)
        try:
            ours = preempted_for_priority(pool, node, where)
            our_counters = startd_counters(pool, JobStarts=2, JobUserPrioPreemptions=1)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_config(reference, REFERENCE_CONFIG, REFERENCE_NODE + execd,
                          lambda ad: ad.get("SlotType") == kind and ad.get("Cpus") == 2
                          and ad.get("Memory") == 1024), \
            priority_preemption(reference), retirement_preemption(reference, retiring):  # fmt: skip
        theirs = preempted_for_priority(reference, None, where)
        their_counters = startd_counters(reference, JobStarts=2, JobUserPrioPreemptions=1)
    assert ours == theirs
    assert our_counters == their_counters
    assert {n: our_counters[n] for n in ("JobPreemptions", "JobRankPreemptions",
                                         "JobUserPrioPreemptions",
                                         "RecentJobUserPrioPreemptions", "ClaimRequests")} \
        == {"JobPreemptions": 1, "JobRankPreemptions": 0, "JobUserPrioPreemptions": 1,
            "RecentJobUserPrioPreemptions": 1, "ClaimRequests": 2}  # fmt: skip
    if retiring:  # the job ends while retiring; its starter's exit hands the slot over
        assert ours[0][-1] == "005" and "004" not in ours[0], ours
        assert ours[-1] == ["Claimed/Retiring", "Claimed/Cleaning", "Preempting/Vacating",
                            "Claimed/Idle", "Claimed/Busy"], ours  # fmt: skip
    else:  # no retirement time: Busy straight to Preempting, then the new claim holds it
        assert ours[0][-1] == "004" and "005" not in ours[0], ours
        assert ours[-1] == ["Preempting/Vacating", "Claimed/Idle", "Claimed/Busy"], ours


BEST = "execdprio"  # a third submitter, of a priority better still than execdrank's


def replaced_while_retiring(pool: harness.Pool, node: PoolNode | None) -> tuple[Any, ...]:
    """execdtest's job retires for execdrank's preempting claim; then execdprio (better
    still) submits: the negotiator matches the slot again, preempting execdrank's waiting
    claim, whose place execdprio's takes (condor_startd's preempting preempting claim).
    The retiring job ends; execdprio's runs, execdrank's stays Idle."""
    start_log = len(pool.daemon_log("StartLog"))
    token = f"{os.getpid()}-{pool._jobs}"
    marks = [Path(RETIRE_MARK.format(token=token)),
             pool.host_path(RETIRE_MARK.format(token=token))]  # fmt: skip
    jobs: list[tuple[harness.SubmittedJob, str]] = []
    try:
        low = submit_files(pool, PLAIN_SUBMIT.format(args=token, extra=""),
                           {"job.sh": RETIRE_SCRIPT})  # fmt: skip
        jobs.append((low, harness.SUBMITTER))
        low.wait_for_event("001", WAIT_S)
        middle = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), SLEEP, user=BETTER)
        jobs.append((middle, BETTER))
        slot_ad(pool, lambda ad: ad["Activity"] == "Retiring"
                and str(ad.get("PreemptingUser", "")).startswith(f"{BETTER}@"))  # fmt: skip
        best = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), SLEEP, user=BEST)
        jobs.append((best, BEST))
        replaced = slot_ad(pool, lambda ad: ad["Activity"] == "Retiring"
                           and str(ad.get("PreemptingUser", "")).startswith(f"{BEST}@"))
        assert claimant(replaced) == harness.SUBMITTER, replaced
        matched = [line for line in pool.daemon_log("NegotiatorLog").splitlines()
                   if f"Matched {best.cluster}.0 {BEST}@" in line]  # fmt: skip
        # the negotiator's words (whom it names as preempted), compared with condor_startd's
        assert matched and " preempting " in matched[0], matched
        preempted = matched[0].split(" preempting ")[1].split("@")[0]
        for mark in marks:
            mark.touch()
        low.wait_for_event("005", WAIT_S)
        best.wait_for_event("001", WAIT_S)
        taken = slot_ad(pool, lambda ad: claimant(ad) == BEST)
        assert (taken["State"], taken["Activity"]) == ("Claimed", "Busy")
        assert job_status(middle) == 1  # Idle: its claim was taken from it
        if node is None:
            moves = startd_moves(pool.daemon_log("StartLog")[start_log:], "slot1",
                                 "user priority")  # fmt: skip
        else:
            node.wait_for("preempting_claim_withdrawn", slot="slot1",
                          why="replaced by a new preempting claim")  # fmt: skip
            moves = execd_moves(node, "slot1")
        return (preempted, timeless(low.events()), timeless(middle.events()),
                timeless(best.events()), moves)  # fmt: skip
    finally:
        for mark in marks:
            mark.unlink(missing_ok=True)
        for job, user in jobs:
            pool.tool("condor_rm", str(job.cluster), user=user)


def test_a_better_user_still_takes_the_place_of_a_waiting_preempting_claim(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """While execdtest's job retires for execdrank's claim, execdprio's claim (equal
    RANK, better priority still) replaces it, as on condor_startd: the same user-log
    events (execdrank's job never runs), states and counters (two preemptions for user
    priority, three claim requests)."""
    execd = LAYOUTS["retiring"][0]
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp, \
            priority_preemption(pool, BEST), early_preemption(pool):  # fmt: skip
        node = start_node(pool, Path(tmp), "STARTER_UPDATE_INTERVAL = 2\n" + execd)
        try:
            ours = replaced_while_retiring(pool, node)
            our_counters = startd_counters(pool, JobStarts=2, JobUserPrioPreemptions=2)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_config(reference, REFERENCE_CONFIG, REFERENCE_NODE + execd,
                          lambda ad: ad.get("SlotType") == "Static" and ad.get("Cpus") == 2
                          and ad.get("Memory") == 1024), \
            priority_preemption(reference, BEST), early_preemption(reference):  # fmt: skip
        theirs = replaced_while_retiring(reference, None)
        their_counters = startd_counters(reference, JobStarts=2, JobUserPrioPreemptions=2)
    assert ours == theirs
    assert our_counters == their_counters
    assert (our_counters["JobPreemptions"], our_counters["ClaimRequests"]) == (2, 3)
    assert ours[1][-1] == "005" and ours[2] == ["000"] and ours[3][-1] == "001", ours
    assert ours[-1] == ["Claimed/Retiring", "Claimed/Cleaning", "Preempting/Vacating",
                        "Claimed/Idle", "Claimed/Busy"], ours  # fmt: skip
