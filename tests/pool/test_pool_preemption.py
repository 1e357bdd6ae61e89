"""RANK preemption by a real higher-ranked match (seed 000: Claimed -> Preempting ->
Claimed for the preempting claim).

execd's static slot has `RANK = TARGET.Owner == "execdrank"`. A claimant of rank 0 holds
it with a running job (execd's own wire client as its schedd, claiming with the offer
from the collector's private ad and activating a `sleep` that execd's starter runs: a
real job of the pool's submitter cannot hold a claim yet, because the shadow
conversation is stubbed and the schedd releases each claim at once, see docs/pool.md).
Then execdrank submits a job. The real negotiator sees in the slot's ad the claim's
RemoteUser and CurrentRank 0, and that the slot ranks the new job 1: it preempts for
rank and hands the real schedd the slot's preempting claim id. execd vacates the running
job, the slot passes through Preempting and is Claimed by the new claim; only then is
the schedd's REQUEST_CLAIM answered, and the schedd activates the ranked job there.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pool_harness as harness
from pool_node import SLEEP_JOB, WAIT_S, PoolNode, start_node, wait_pool
from test_pool_claims import offered_claim, request_claim

from execd.wire.commands import Reply

RANKED = "execdrank"


def activated_job(node: PoolNode, cluster: int) -> dict[str, Any] | None:
    return next((e for e in node.events() if e["event"] == "pool_activated"
                 and f"#{cluster}.0#" in e.get("job", "")), None)  # fmt: skip


def test_a_higher_ranked_match_preempts_the_claim(pool: harness.Pool) -> None:
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), "SLOT_TYPE_1_PARTITIONABLE = False\n"
                                           f'RANK = TARGET.Owner == "{RANKED}"\n')  # fmt: skip
        (name,) = wait_pool(pool, "execd's static slot", lambda s: s)
        offer = asyncio.run(offered_claim(pool))
        reply = asyncio.run(request_claim(node.address(), offer))
        assert reply.status == Reply.OK
        # (a claim activated without a shadow never starts its job since the shadow's
        # conversation drives the starter: the low claim is held Claimed/Idle)
        # the negotiator sees who holds the claim and the rank it holds it at
        claimed = wait_pool(pool, "the claimant in condor_status", lambda s: s[name].get(
            "RemoteOwner") == "nobody" and s[name]["State"] == "Claimed" and s)  # fmt: skip
        assert claimed[name]["CurrentRank"] == 0.0
        assert claimed[name]["RemoteUser"].startswith("nobody@")
        assert asyncio.run(offered_claim(pool)) != offer  # the preempting claim id

        high = pool.submit(SLEEP_JOB, user=RANKED)
        try:
            preempting = node.wait_for("preempting_claim", slot="slot1", timeout=WAIT_S,
                                       why="preempting claim based on machine rank")  # fmt: skip
            node.wait_for("pool_claim_preempting", slot="slot1")
            taken = node.wait_for("pool_claimed", slot="slot1", timeout=WAIT_S)
            events = node.events()
            between = events[events.index(preempting):events.index(taken)]
            moves = [e["new"] for e in between
                     if e["event"] == "slot_state_changed" and e["slot"] == "slot1"]
            # the low job is evicted: the slot leaves through Preempting, its starter
            # goes, and the new claim holds the slot before the schedd hears OK
            assert any(m.startswith("Preempting/") for m in moves), moves
            assert moves[-1] == "Claimed/Idle", moves
            # the schedd activates the new claim with the higher-ranked job
            harness.wait_for("the ranked job activated",
                             lambda: activated_job(node, high.cluster), WAIT_S, 0.2)  # fmt: skip
            # the negotiator's own words: it matched the ranked job preempting nobody's
            matched = [line for line in pool.daemon_log("NegotiatorLog").splitlines()
                       if f"Matched {high.cluster}.0 {RANKED}@" in line]  # fmt: skip
            assert matched and "preempting nobody@" in matched[0], matched
        finally:
            pool.tool("condor_rm", str(high.cluster), user=RANKED).check()
        assert node.stop() == 0


def test_a_preempting_claim_id_without_a_higher_rank_is_refused(pool: harness.Pool) -> None:
    """The claimed slot's offer claims only for a job the slot ranks higher."""
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), "SLOT_TYPE_1_PARTITIONABLE = False\n"
                                           f'RANK = TARGET.Owner == "{RANKED}"\n')  # fmt: skip
        (name,) = wait_pool(pool, "execd's static slot", lambda s: s)
        offer = asyncio.run(offered_claim(pool))
        assert asyncio.run(request_claim(node.address(), offer)).status == Reply.OK
        preempting = harness.wait_for("the preempting claim id advertised",
                                      lambda: (o := asyncio.run(offered_claim(pool))) != offer
                                      and o, WAIT_S, 0.2)  # fmt: skip
        # the same rank (0) as the current claim: refused, the claim stays
        assert asyncio.run(request_claim(node.address(), preempting)).status == Reply.NOT_OK
        refused = node.wait_for("pool_claim_refused", slot="slot1")
        assert "slot is Claimed" in refused["why"], refused
        assert node.slots()[name]["State"] == "Claimed"
        assert not any(e["event"] in ("preempting_claim", "pool_claim_preempting")
                       for e in node.events())  # fmt: skip
        assert asyncio.run(offered_claim(pool)) == preempting  # still on offer
        assert preempting[-64:] not in node.log.read_text()
        assert node.stop() == 0
