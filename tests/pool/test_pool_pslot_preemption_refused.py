"""A refused partitionable-slot preemption (the negotiator's ALLOW_PSLOT_PREEMPTION) by
the real negotiator and schedd, compared with condor_startd 25.14.1: what the schedd is
told, and what the negotiator does next.

The setup of test_pool_pslot_preemption (execdrank's 2-CPU job preempts execdtest's two
1-CPU jobs for user priority), with an hour of retirement on the execute point that the
two jobs lower to 0 until a moment after they started: their d-slots are published
with no retirement left, the negotiator preempts them, and at the REQUEST_CLAIM the
execute point finds an hour left and refuses (condor_startd's request_claim, command.cpp:
"still has retirement time, can't preempt immediately", then `goto abort`).
"""

from __future__ import annotations

import re
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pool_harness as harness
from pool_node import WAIT_S, PoolNode, pool_slots, start_node, wait_pool
from test_pool_jobs import PLAIN_SUBMIT, submit_files, timeless
from test_pool_preemption import REFERENCE_NODE, SLEEP, job_status, reference_config
from test_pool_pslot_preemption import (
    HIGH,
    LOW,
    PSLOT,
    REFERENCE_CONFIG,
    busy,
    layout,
    pslot_preemption_allowed,
)
from test_pool_user_priority import BETTER, priority_preemption

# The low jobs' retirement begins this long after their submission: their d-slots' ads,
# published while it was 0, let the negotiator preempt them; at the REQUEST_CLAIM it is
# an hour, and the execute point refuses.
RETIRE_AFTER_S = 45  # room for both jobs to start on a loaded 2-core CI machine
# an hour of retirement, which the jobs lower to 0 until RETIRE_AFTER_S; slot ads
# published on state changes only (not again once the retirement begins)
RETIRING = "MAXJOBRETIREMENTTIME = 3600\nUPDATE_INTERVAL = 600\n"
CLAIM_FAILURES = re.compile(r"(Response problem from startd when requesting claim|"
                            r"Request was NOT accepted for claim)")


def claim_failures(pool: harness.Pool) -> list[str]:
    """What the schedd logged of each REQUEST_CLAIM that did not get a claim."""
    return [m.group(1) for m in map(CLAIM_FAILURES.search,
                                    pool.daemon_log("SchedLog").splitlines()) if m]


def negotiation_cycles(pool: harness.Pool) -> int:
    return pool.daemon_log("NegotiatorLog").count("Started Negotiation Cycle")


def refused_preemption(pool: harness.Pool) -> tuple[Any, ...]:
    """Two 1-CPU jobs of execdtest whose retirement begins RETIRE_AFTER_S after their
    submission; execdrank's 2-CPU job, submitted once it has, is matched by preempting
    both from the stale ads and refused at the execute point. What the schedd logs and
    what becomes of the jobs over the next negotiation cycles."""
    began = int(time.time()) + RETIRE_AFTER_S
    retire = f"\n+MaxJobRetirementTime = ifThenElse(time() >= {began}, 3600, 0)"
    lows = [submit_files(pool, PLAIN_SUBMIT.format(args="", extra=LOW + retire), SLEEP)
            for _ in range(2)]  # fmt: skip
    high: harness.SubmittedJob | None = None
    try:
        for low in lows:
            low.wait_for_event("001", WAIT_S)
        wait_pool(pool, "two busy d-slots", lambda s: busy(s, harness.SUBMITTER) == 2
                  and len(s) == 3)  # fmt: skip
        assert time.time() < began, "the jobs took too long to start"
        time.sleep(began + 1 - time.time())  # a time, not an event: retirement begins
        failed = len(claim_failures(pool))
        high = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=HIGH), SLEEP, user=BETTER)
        harness.wait_for("the schedd's failed claim request",
                         lambda: len(claim_failures(pool)) > failed, WAIT_S)  # fmt: skip
        cycles = negotiation_cycles(pool)
        harness.wait_for("five more negotiation cycles",
                         lambda: negotiation_cycles(pool) >= cycles + 5, WAIT_S)  # fmt: skip
        matched = pool.daemon_log("NegotiatorLog").count(f"Matched {high.cluster}.0 ")
        return (claim_failures(pool)[failed:], matched, job_status(high),
                [timeless(low.events()) for low in lows], layout(pool_slots(pool)))
    finally:
        for low in lows:
            pool.tool("condor_rm", str(low.cluster))
        if high is not None:
            pool.tool("condor_rm", str(high.cluster), user=BETTER)


def pslot_moves_on_condor_startd(start_log: str) -> list[str]:
    """slot1's state changes in the StartLog from the refusal on."""
    after = start_log[start_log.index("can't preempt immediately"):]
    return re.findall(r" slot1: Changing state: (\w+ -> \w+)", after)


def pslot_moves_on_execd(node: PoolNode) -> list[str]:
    """slot1's state changes in execd's log from the refusal on."""
    events = node.events()
    first = next(n for n, e in enumerate(events) if e["event"] == "pslot_preemption_refused")
    return [f"{e['old'].split('/')[0]} -> {e['new'].split('/')[0]}" for e in events[first:]
            if e["event"] == "slot_state_changed" and e["slot"] == "slot1"]  # fmt: skip


def test_a_refused_pslot_preemption_is_answered_by_closing_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """The negotiator preempts two d-slots from ads published before their jobs'
    retirement began; at the REQUEST_CLAIM they have an hour left and the execute point
    refuses. condor_startd 25.14.1 answers nothing (it closes the connection: the
    schedd logs "Response problem from startd when requesting claim"), its p-slot
    passes Owner ("claiming protocol failed") and is published again, so the negotiator
    matches the job no more: one refusal, the job Idle, the two jobs running on. execd
    does the same; before, it answered NOT_OK ("Request was NOT accepted for claim"),
    published nothing and was matched and refused again in every negotiation cycle."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp, \
            pslot_preemption_allowed(pool), priority_preemption(pool):  # fmt: skip
        node = start_node(pool, Path(tmp), RETIRING + PSLOT)
        try:
            ours = refused_preemption(pool)
            our_moves = pslot_moves_on_execd(node)
            (refused,) = [e for e in node.events() if e["event"] == "pslot_preemption_refused"]
            assert refused["why"].startswith("slot1_") and "retirement time" in refused["why"]
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_config(reference, REFERENCE_CONFIG, REFERENCE_NODE + PSLOT + RETIRING,
                          lambda ad: ad.get("SlotType") == "Partitionable"
                          and ad.get("Cpus") == 2 and ad.get("Memory") == 1024), \
            pslot_preemption_allowed(reference), priority_preemption(reference):  # fmt: skip
        theirs = refused_preemption(reference)
        their_moves = pslot_moves_on_condor_startd(reference.daemon_log("StartLog"))
    assert ours == theirs
    assert our_moves == their_moves == ["Unclaimed -> Owner", "Owner -> Unclaimed"], (
        our_moves, their_moves)
    failures, matched, high_status, lows, _slots = ours
    assert failures == ["Response problem from startd when requesting claim"], ours
    assert (matched, high_status) == (1, 1), ours  # matched once, Idle
    assert lows == 2 * [["000", "040", "040", "001"]], ours  # never evicted
