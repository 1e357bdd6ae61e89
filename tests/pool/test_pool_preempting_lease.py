"""A preempting claim waits out a retirement longer than its own lease, as on
condor_startd 25.14.1; one that the node drops while it waits is refused at once.

condor_startd starts a claim's lease (its ClaimLease timer) when the claim takes the
slot (Claim::beginClaim); a preempting claim waiting for the running job to retire has
none running, however long the retirement. So a job of `job_lease_duration = 15`
that preempts for RANK a job retiring for 30 s more runs once the retiring job ends:
the preempting claim is not dropped when 15 s have passed (the retiring job does not
unretire).

A waiting preempting claim that goes without taking the slot has its REQUEST_CLAIM
answered NOT_OK, as condor_startd's remove_pre refuses the held request; nothing of it
is left on the node (its claim id claims nothing any more). condor_drain keeps it
waiting until the job is gone (the drain's START refuses it then); nothing but its
schedd giving up (closing the request's connection) ends the wait before that.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from pool_node import WAIT_S, PoolNode, start_node
from test_pool_claims import JOB, offered_claim, request_claim
from test_pool_daemon import administrators
from test_pool_jobs import PLAIN_SUBMIT, submit_files, timeless
from test_pool_preemption import (
    RANKED,
    RETIRE_MARK,
    RETIRE_SCRIPT,
    RETIRING,
    claimant,
    early_preemption,
    ranked_claim_waiting,
    reference_slot_layout,
    slot1_moves,
    slot_ad,
)

from execd.wire.classad_codec import from_values
from execd.wire.commands import Reply
from execd.wire.security import SessionNotFoundError

LEASE_S = 15  # the preempting job's JobLeaseDuration
RETIRE_FOR_S = 2 * LEASE_S  # how long the retiring job runs on once let end
# Runs until the test lets it end, then RETIRE_FOR_S longer: all of it in retirement.
LONG_RETIRE_SCRIPT = f"""#!/bin/sh
echo started
while [ ! -e {RETIRE_MARK.format(token="$1")} ]; do sleep 0.1; done
sleep {RETIRE_FOR_S}
echo retired
"""


def preempted_after_a_long_retirement(pool: harness.Pool,
                                      node: PoolNode | None) -> tuple[Any, ...]:  # fmt: skip
    """The submitter's job runs; execdrank's (ranked higher, a lease of LEASE_S) preempts
    it; the first retires RETIRE_FOR_S more and ends (005); the ranked job then runs."""
    start_log = len(pool.daemon_log("StartLog"))
    with ranked_claim_waiting(pool, LONG_RETIRE_SCRIPT,
                              f"job_lease_duration = {LEASE_S}") as (low, high, _, let_end):
        let_end()
        low.wait_for_event("005", WAIT_S + RETIRE_FOR_S)
        high.wait_for_event("001", WAIT_S)
        taken = slot_ad(pool, lambda ad: claimant(ad) == RANKED)
        assert (taken["State"], taken["Activity"]) == ("Claimed", "Busy")
        if node is not None:
            assert not [e for e in node.events()
                        if e["event"] == "preempting_claim_withdrawn"]  # fmt: skip
        return timeless(low.events()), timeless(high.events()), slot1_moves(pool, node, start_log)


def test_a_preempting_claim_waits_out_a_retirement_longer_than_its_lease(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """The retiring job ends on its own (005, no 004) after more than twice the ranked
    job's lease; the ranked job runs then (001), Claimed/Busy: the same user-log events
    and states as on condor_startd configured alike."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp, early_preemption(pool):
        node = start_node(pool, Path(tmp), "STARTER_UPDATE_INTERVAL = 2\n" + RETIRING.execd)
        try:
            ours = preempted_after_a_long_retirement(pool, node)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_slot_layout(reference, RETIRING), early_preemption(reference):
        theirs = preempted_after_a_long_retirement(reference, None)
    assert ours == theirs
    assert ours[0][-1] == "005" and "004" not in ours[0], ours
    assert ours[1][-1] == "001", ours
    assert ours[-1] == ["Claimed/Retiring", "Claimed/Cleaning", "Preempting/Vacating",
                        "Claimed/Idle", "Claimed/Busy"], ours  # fmt: skip


def test_a_waiting_preempting_claim_the_drain_keeps_is_refused_when_the_job_ends(
        pool: harness.Pool) -> None:  # fmt: skip
    """The submitter's job retires for a ranked REQUEST_CLAIM (the slot's preempting
    claim id); condor_drain leaves that claim waiting, its REQUEST_CLAIM unanswered, as
    condor_startd does. The job ends: the drain's START refuses the claim, its
    REQUEST_CLAIM is answered NOT_OK, its claim id claims nothing any more, the slot
    drains."""
    ranked = from_values({**dict(JOB.items()), "Owner": RANKED})
    token = f"{os.getpid()}-{pool._jobs}"
    mark = Path(RETIRE_MARK.format(token=token))
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), administrators(pool) + RETIRING.execd)
        low = submit_files(pool, PLAIN_SUBMIT.format(args=token, extra=""),
                           {"job.sh": RETIRE_SCRIPT})  # fmt: skip
        try:
            low.wait_for_event("001", WAIT_S)
            busy = slot_ad(pool, lambda ad: ad["Activity"] == "Busy"
                           and claimant(ad) == harness.SUBMITTER)  # fmt: skip
            preempting = asyncio.run(offered_claim(pool))

            async def preempt_drain_then_end() -> Reply:
                request = asyncio.create_task(request_claim(
                    node.address(), preempting, job=ranked, reply_timeout_s=WAIT_S))
                await asyncio.to_thread(node.wait_for, "pool_claim_preempting", slot="slot1")
                await asyncio.to_thread(
                    lambda: pool.tool("condor_drain", busy["Name"]).check())
                await asyncio.to_thread(node.wait_for, "pool_drain")
                draining = await asyncio.to_thread(slot_ad, pool, lambda ad: (
                    "DrainReason" in ad and ad["Activity"] == "Retiring"))
                assert draining.get("PreemptingUser", "").startswith(f"{RANKED}@"), draining
                assert not request.done()  # still waiting for the job
                mark.touch()
                return (await request).status

            assert asyncio.run(preempt_drain_then_end()) == Reply.NOT_OK
            dropped = node.wait_for("preempting_claim_withdrawn", slot="slot1")
            assert dropped["why"] == "START is false"
            low.wait_for_event("005", WAIT_S)
            with pytest.raises(SessionNotFoundError):
                asyncio.run(request_claim(node.address(), preempting, job=ranked))
            slot_ad(pool, lambda ad: ad["State"] == "Drained")
            assert preempting[-64:] not in node.log.read_text()
        finally:
            mark.unlink(missing_ok=True)
            pool.tool("condor_rm", str(low.cluster))
            node.stop(signal.SIGQUIT)


def test_a_waiting_preempting_claim_whose_schedd_gives_up_is_withdrawn(
        pool: harness.Pool) -> None:  # fmt: skip
    """The schedd gives up a REQUEST_CLAIM by closing its connection (REQUEST_CLAIM_TIMEOUT,
    30 minutes by default, is its only bound: condor_startd has no timer of its own and
    removes the claim when the socket closes, requestClaimSockClosed). The waiting claim
    is withdrawn and the retiring job unretires (Claimed/Busy, no preempting claim
    advertised); its claim id claims nothing any more."""
    ranked = from_values({**dict(JOB.items()), "Owner": RANKED})
    token = f"{os.getpid()}-{pool._jobs}"
    mark = Path(RETIRE_MARK.format(token=token))
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), RETIRING.execd)
        low = submit_files(pool, PLAIN_SUBMIT.format(args=token, extra=""),
                           {"job.sh": RETIRE_SCRIPT})  # fmt: skip
        try:
            low.wait_for_event("001", WAIT_S)
            slot_ad(pool, lambda ad: ad["Activity"] == "Busy"
                    and claimant(ad) == harness.SUBMITTER)  # fmt: skip
            preempting = asyncio.run(offered_claim(pool))

            async def preempt_then_give_up() -> None:
                request = asyncio.create_task(request_claim(
                    node.address(), preempting, job=ranked, reply_timeout_s=WAIT_S))
                await asyncio.to_thread(node.wait_for, "pool_claim_preempting", slot="slot1")
                await asyncio.to_thread(slot_ad, pool, lambda ad: ad["Activity"] == "Retiring")
                request.cancel()  # the connection closes, unanswered
                with contextlib.suppress(asyncio.CancelledError):
                    await request

            asyncio.run(preempt_then_give_up())
            refused = node.wait_for("pool_claim_refused", slot="slot1")
            assert refused["why"] == "the schedd closed its claim request"
            node.wait_for("preempting_claim_withdrawn", slot="slot1")
            node.wait_for("slot_state_changed", slot="slot1", new="Claimed/Busy", transition="19")
            busy = slot_ad(pool, lambda ad: ad["Activity"] == "Busy")
            assert claimant(busy) == harness.SUBMITTER and "PreemptingUser" not in busy, busy
            with pytest.raises(SessionNotFoundError):
                asyncio.run(request_claim(node.address(), preempting, job=ranked))
            mark.touch()
            low.wait_for_event("005", WAIT_S)
            assert "004" not in low.events()
        finally:
            mark.unlink(missing_ok=True)
            pool.tool("condor_rm", str(low.cluster))
            node.stop(signal.SIGQUIT)
