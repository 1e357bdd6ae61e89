"""Partitionable-slot preemption (the negotiator's ALLOW_PSLOT_PREEMPTION) by the real
negotiator and schedd, compared with condor_startd 25.14.1.

The negotiator is reconfigured with ALLOW_PSLOT_PREEMPTION = True and, as in
test_pool_user_priority, to preempt for user priority (PREEMPTION_REQUIREMENTS, and
execdtest's priority factor a thousand times worse than execdrank's). The execute point
has its one p-slot of 2 CPUs / 1024 MB. execdtest submits two 1-CPU jobs: two d-slots
run them and the p-slot has no CPU left. execdrank submits a 2-CPU job that asks for
p-slot preemption (WantPslotPreemption): it fits in neither d-slot alone, so the
negotiator counts both d-slots' resources into the p-slot (its ChildCpus & co. and the
d-slots' claim ids in its private ChildClaimIds), matches the p-slot and hands the
schedd its claim id plus both d-slots'. The schedd's REQUEST_CLAIM to the p-slot
carries them; the execute point kills both d-slots' claims and carves execdrank's
d-slot from what they give back. What users see must be the same on execd and on
condor_startd: both evicted jobs' user logs (004, requeued Idle), execdrank's (001),
the slots before and after (types, resources, states, claimants), the negotiator's
words, and the startd's counters (condor_startd counts no preemption for this).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from pool_node import WAIT_S, PoolNode, pool_slots, start_node, wait_pool
from test_pool_claims import request_claim
from test_pool_daemon_attrs import startd_counters
from test_pool_jobs import PLAIN_SUBMIT, submit_files, timeless
from test_pool_preemption import (
    REFERENCE_NODE,
    SLEEP,
    claimant,
    evicted_lines,
    job_status,
    reference_config,
)
from test_pool_user_priority import BETTER, priority_preemption

from execd.claims.ids import parse_claim_id
from execd.errors import RemoteProtocolError
from execd.wire.classad_codec import to_classad
from execd.wire.collector import CollectorClient
from execd.wire.commands import Command, Reply
from execd.wire.security import ClientSecurity, SessionNotFoundError
from execd.wire.sinful import parse_sinful

NEGOTIATOR_CONFIG = "96-execd-pslot-preemption.conf"
PSLOT = "SLOT_TYPE_1_PARTITIONABLE = True\n"
REFERENCE_CONFIG = "99-execd-pslot-preemption.conf"
LOW = "request_cpus = 1"
HIGH = "request_cpus = 2\n+WantPslotPreemption = true"


@contextlib.contextmanager
def pslot_preemption_allowed(pool: harness.Pool) -> Iterator[None]:
    """The negotiator with ALLOW_PSLOT_PREEMPTION = True (and back to its default)."""
    config = pool.host_path(f"/etc/condor/config.d/{NEGOTIATOR_CONFIG}")
    config.write_text("ALLOW_PSLOT_PREEMPTION = True\n")
    try:
        negotiator_knob(pool, True)
        yield
    finally:
        config.unlink(missing_ok=True)
        negotiator_knob(pool, False)


def negotiator_knob(pool: harness.Pool, allowed: bool) -> None:
    """condor_reconfig, then the running negotiator's own value (by default undefined)."""
    pool.tool("condor_reconfig", "-negotiator").check()
    harness.wait_for(f"the negotiator's ALLOW_PSLOT_PREEMPTION {allowed}",
                     lambda: (pool.tool("condor_config_val", "-negotiator",
                                        "ALLOW_PSLOT_PREEMPTION").stdout.strip().lower()
                              == "true") == allowed, WAIT_S, 0.2)  # fmt: skip


def layout(slots: dict[str, dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Every slot as users see it in condor_status (d-slot names left out: which id
    a new d-slot gets is the startd's business)."""
    return sorted((ad["SlotType"], ad["Cpus"], ad["Memory"], ad["State"], ad["Activity"],
                   claimant(ad) or "", ad.get("NumDynamicSlots"))
                  for ad in slots.values())  # fmt: skip


def busy(slots: dict[str, dict[str, Any]], user: str) -> int:
    return sum(1 for ad in slots.values() if ad["SlotType"] == "Dynamic"
               and claimant(ad) == user and ad["Activity"] == "Busy")  # fmt: skip


async def private_ads(pool: harness.Pool) -> dict[str, Any]:
    """The startd private ads in the collector (where the negotiator reads claim ids)."""
    client = CollectorClient(parse_sinful(pool.collector), ClientSecurity(timeout_s=10))
    try:
        ads = await client.query(Command.QUERY_STARTD_PVT_ADS, "Machine")
    finally:
        await client.close()
    return {str(to_classad(ad)["Name"]).split("@")[0]: to_classad(ad) for ad in ads}


def child_claim_ids(pool: harness.Pool) -> list[str]:
    """The p-slot's ChildClaimIds, checked against the d-slots' own offers: one per
    d-slot, in the order of its Child lists (ChildName)."""
    private = asyncio.run(private_ads(pool))
    ids = [str(c) for c in private["slot1"]["ChildClaimIds"]]
    pslot = next(ad for name, ad in pool_slots(pool).items() if name.startswith("slot1@"))
    names = [str(n).split("@")[0] for n in pslot["ChildName"]]
    assert ids == [str(private[name]["ClaimId"]) for name in names], (names, len(ids))
    return ids


def pslot_preempted(pool: harness.Pool, node: PoolNode | None) -> tuple[Any, ...]:
    """Two 1-CPU jobs of execdtest fill the p-slot; execdrank's 2-CPU job preempts both
    d-slots. What users see."""
    lows = [submit_files(pool, PLAIN_SUBMIT.format(args="", extra=LOW), SLEEP)
            for _ in range(2)]  # fmt: skip
    high: harness.SubmittedJob | None = None
    try:
        for low in lows:
            low.wait_for_event("001", WAIT_S)
        before = wait_pool(pool, "two busy d-slots and a full p-slot", lambda s: busy(
            s, harness.SUBMITTER) == 2 and len(s) == 3 and s)  # fmt: skip
        secrets = [parse_claim_id(c).secret for c in child_claim_ids(pool)]
        assert len(secrets) == 2
        high = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=HIGH), SLEEP, user=BETTER)
        logs = [low.wait_for_event("004", WAIT_S) for low in lows]
        high.wait_for_event("001", WAIT_S)
        harness.wait_for("the evicted jobs Idle in condor_q",
                         lambda: all(job_status(low) == 1 for low in lows), WAIT_S, 0.2)
        after = wait_pool(pool, "execdrank's d-slot busy", lambda s: busy(s, BETTER) == 1
                          and len(s) == 2 and s)  # fmt: skip
        matched = [line for line in pool.daemon_log("NegotiatorLog").splitlines()
                   if f"Matched {high.cluster}.0 {BETTER}@" in line]  # fmt: skip
        assert matched, "the negotiator never matched the job"
        words = re.sub(r"^.*? Matched \S+ \S+ <\S+> ", "", matched[0])
        if node is not None:
            preempting = node.wait_for("pslot_preempting", slot="slot1")
            assert sorted(preempting["dslots"]) == ["slot1_1", "slot1_2"], preempting
            node.wait_for("pslot_preempted", slot="slot1")
            log = node.log.read_text()
            assert not [s for s in secrets if s in log]
        return ([timeless(low.events()) for low in lows], [evicted_lines(t) for t in logs],
                timeless(high.events()), layout(before), layout(after),
                re.sub(r"<\S+> slot1@\S+", "<EP> slot1@NODE", words))  # fmt: skip
    finally:
        for low in lows:
            pool.tool("condor_rm", str(low.cluster))
        if high is not None:
            pool.tool("condor_rm", str(high.cluster), user=BETTER)


def test_a_request_naming_a_foreign_or_unknown_dslot_is_refused_a_good_one_kills(
        pool: harness.Pool) -> None:  # fmt: skip
    """Over the wire, as the real schedd: two p-slots of 1 CPU, each with a d-slot. A
    REQUEST_CLAIM of slot1 naming slot2's d-slot, or a claim id execd never made, is
    refused (`pslot_preemption_refused` naming the problem) and kills nothing; as
    condor_startd, it gets no answer (the connection closes), slot1 passes Owner and
    offers a new claim id (the old one is refused); naming slot1_1 kills its claim and
    carves the new d-slot from its CPU."""
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), "NUM_SLOTS_TYPE_1 = 2\nSLOT_TYPE_1 = 50%\n" + PSLOT)
        wait_pool(pool, "execd's two p-slots", lambda s: len(s) == 2)
        offers = {n: str(ad["ClaimId"]) for n, ad in asyncio.run(private_ads(pool)).items()}
        first = asyncio.run(request_claim(node.address(), offers["slot1"]))
        other = asyncio.run(request_claim(node.address(), offers["slot2"]))
        assert first.leftover is not None and other.leftover is not None
        (dslot,), (foreign,) = first.claimed, other.claimed
        unknown = dslot.claim_id.replace("#", "#9", 2)  # well formed, never made
        leftover = first.leftover.claim_id
        used = [leftover]
        for seen, (preempting, why) in enumerate((
                ([foreign.claim_id], "is slot2_1's, not a dynamic slot of slot1"),
                ([dslot.claim_id, unknown], "is no claim of any slot"))):  # fmt: skip
            with pytest.raises(RemoteProtocolError, match="closed the connection"):
                asyncio.run(request_claim(node.address(), leftover,
                                          preempting=tuple(preempting)))  # fmt: skip
            refused = harness.wait_for("the refusal in the log", lambda n=seen: [
                e for e in node.events() if e["event"] == "pslot_preemption_refused"][n:],
                WAIT_S)  # fmt: skip
            assert refused[0]["slot"] == "slot1" and refused[0]["why"].endswith(why), refused
            assert [(e["old"], e["new"], e["trigger"]) for e in node.events()
                    if e["event"] == "slot_state_changed" and e["slot"] == "slot1"][-2:] == [
                ("Unclaimed/Idle", "Owner/Idle", "claim_aborted"),
                ("Owner/Idle", "Unclaimed/Idle", "is_owner_false")]  # fmt: skip
            leftover = harness.wait_for("slot1's new offer in the collector", lambda: (
                new := str(asyncio.run(private_ads(pool))["slot1"]["ClaimId"])) not in used
                and new, WAIT_S)  # fmt: skip
            used.append(leftover)
        with pytest.raises(SessionNotFoundError):  # an aborted claim's id: its session gone
            asyncio.run(request_claim(node.address(), used[0], preempting=(dslot.claim_id,)))
        assert {n: ad["State"] for n, ad in node.slots().items() if "_" in n.split("@")[0]} \
            == {n: "Claimed" for n in node.slots() if "_" in n.split("@")[0]}  # fmt: skip
        reply = asyncio.run(request_claim(node.address(), leftover, preempting=(dslot.claim_id,)))
        assert reply.status == Reply.OK
        (carved,) = reply.claimed
        assert int(dict(carved.ad)["Cpus"]) == 1
        node.wait_for("pslot_preempted", slot="slot1", dslots=["slot1_1"])
        harness.wait_for("the killed claim ended by execd", lambda: [  # and told its schedd
            e for e in node.events() if e["event"] == "pool_claim_ended"
            and (e["slot"], e["ended_by"]) == ("slot1_1", "execd")], WAIT_S)  # fmt: skip
        states = {n.split("@")[0]: ad["State"] for n, ad in node.slots().items()}
        assert states == {"slot1": "Unclaimed", "slot1_1": "Claimed", "slot2": "Unclaimed",
                          "slot2_1": "Claimed"}, states  # slot1_1 again: its id is free
        log = node.log.read_text()
        assert not [c for c in (dslot.claim_id, foreign.claim_id, *used)
                    if c[-64:] in log]  # fmt: skip
        assert node.stop(signal.SIGQUIT) == 0


def test_a_better_users_big_job_preempts_several_dslots_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp, \
            pslot_preemption_allowed(pool), priority_preemption(pool):  # fmt: skip
        node = start_node(pool, Path(tmp), "STARTER_UPDATE_INTERVAL = 2\n" + PSLOT)
        try:
            ours = pslot_preempted(pool, node)
            our_counters = startd_counters(pool, JobStarts=3)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_config(reference, REFERENCE_CONFIG, REFERENCE_NODE + PSLOT,
                          lambda ad: ad.get("SlotType") == "Partitionable"
                          and ad.get("Cpus") == 2 and ad.get("Memory") == 1024), \
            pslot_preemption_allowed(reference), priority_preemption(reference):  # fmt: skip
        theirs = pslot_preempted(reference, None)
        their_counters = startd_counters(reference, JobStarts=3)
    assert ours == theirs
    assert our_counters == their_counters
    assert {n: our_counters[n] for n in ("JobPreemptions", "JobRankPreemptions",
                                         "JobUserPrioPreemptions", "ClaimRequests")} \
        == {"JobPreemptions": 0, "JobRankPreemptions": 0, "JobUserPrioPreemptions": 0,
            "ClaimRequests": 3}  # fmt: skip
    for events in ours[0]:
        assert events[-1] == "004" and "005" not in events, ours
    assert ours[1][0] == ["Job was evicted. Code 1019 Subcode 0",
                          "Reason: Preempted for a Priority user"], ours
    assert ours[2][-1] == "001", ours
    assert ours[5] == "preempting 2 dslots <EP> slot1@NODE", ours
    # before: two d-slots of 1 CPU busy for execdtest, the p-slot empty; after: one of
    # 2 CPUs busy for execdrank
    assert [(kind, cpus, state, user) for kind, cpus, _, state, _, user, _ in ours[3]] == [
        ("Dynamic", 1, "Claimed", harness.SUBMITTER), ("Dynamic", 1, "Claimed", harness.SUBMITTER),
        ("Partitionable", 0, "Unclaimed", "")], ours
    assert [(kind, cpus, state, user) for kind, cpus, _, state, _, user, _ in ours[4]] == [
        ("Dynamic", 2, "Claimed", BETTER), ("Partitionable", 0, "Unclaimed", "")], ours


def test_the_priority_vacate_reason_survives_execd_restart_while_the_kill_is_under_way(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """The preemption above with `execd restart` while the d-slots' kills are under way
    (their starters stopped, so each has its hard kill pending): the new image adopts
    both jobs and goes on killing them (`eviction_resumed`, killing), and both evicted
    jobs' 004 still says "Preempted for a Priority user" (1019), as condor_startd's do
    without a restart (the test above), not "Unspecified job interruption" (1005)."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp, \
            pslot_preemption_allowed(pool), priority_preemption(pool):  # fmt: skip
        node = start_node(pool, Path(tmp), "STARTER_UPDATE_INTERVAL = 2\n" + PSLOT)
        lows = [submit_files(pool, PLAIN_SUBMIT.format(args="", extra=LOW), SLEEP)
                for _ in range(2)]  # fmt: skip
        high: harness.SubmittedJob | None = None
        stopped: list[int] = []
        try:
            for low in lows:
                low.wait_for_event("001", WAIT_S)
            wait_pool(pool, "two busy d-slots", lambda s: busy(s, harness.SUBMITTER) == 2
                      and len(s) == 3)  # fmt: skip
            starters = [e["pid"] for e in node.events() if e["event"] == "starter_spawned"]
            assert len(starters) == 2, starters
            try:
                for pid in starters:  # a starter that is slow to act on the kill
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                high = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=HIGH), SLEEP,
                                    user=BETTER)  # fmt: skip
                node.wait_for("pslot_preempting", slot="slot1")
                restarted = node.execd("restart")
                assert restarted.returncode == 0, restarted.stderr
                assert "2 running jobs re-adopted" in restarted.stdout, restarted.stdout
                resumed = [(e["slot"], e["how"]) for e in node.events()
                           if e["event"] == "eviction_resumed"]  # fmt: skip
                assert sorted(resumed) == [("slot1_1", "killing"), ("slot1_2", "killing")]
            finally:
                for pid in stopped:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
            logs = [low.wait_for_event("004", WAIT_S) for low in lows]
            high.wait_for_event("001", WAIT_S)
            assert [evicted_lines(log) for log in logs] == 2 * [[
                "Job was evicted. Code 1019 Subcode 0",
                "Reason: Preempted for a Priority user"]], logs  # fmt: skip
            harness.wait_for("the evicted jobs Idle in condor_q",
                             lambda: all(job_status(low) == 1 for low in lows), WAIT_S, 0.2)
        finally:
            for low in lows:
                pool.tool("condor_rm", str(low.cluster))
            if high is not None:
                pool.tool("condor_rm", str(high.cluster), user=BETTER)
            node.stop(signal.SIGQUIT)

