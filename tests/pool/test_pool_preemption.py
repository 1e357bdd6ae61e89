"""RANK preemption by a real higher-ranked match (seed 000: Claimed -> Preempting ->
Claimed for the preempting claim), with real jobs on both claims.

execd's static slot has `RANK = TARGET.Owner == "execdrank"`. The pool's ordinary
submitter's job is matched by the real negotiator, claimed by the real schedd and runs
on `execd run` (its starter, its cgroup, Claimed/Busy, CurrentRank 0). Then execdrank
submits a job. The real negotiator sees in the slot's ad the claim's RemoteUser and
CurrentRank 0, and that the slot ranks the new job 1: it preempts for rank and hands the
real schedd the slot's preempting claim id. execd evicts the running job (its shadow
logs 004 and the schedd requeues it, Idle), the slot passes through Preempting and is
Claimed by the new claim; only then is the schedd's REQUEST_CLAIM answered, and the
ranked job runs there. The same two jobs on the pool's own condor_startd, configured
alike, leave the same user-log events.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
from pool_node import WAIT_S, PoolNode, start_node, wait_pool
from test_pool_claims import offered_claim, request_claim
from test_pool_jobs import (
    NOBODY,
    PLAIN_SUBMIT,
    SLEEP_SCRIPT,
    running_in_cgroup,
    submit_files,
    timeless,
    uid_of,
)

from execd.wire.commands import Reply

RANKED = "execdrank"
SLOT_CONFIG = f'SLOT_TYPE_1_PARTITIONABLE = False\nRANK = TARGET.Owner == "{RANKED}"\n'
# condor_startd laid out as execd's node: one static slot of 2 CPUs / 1024 MB.
REFERENCE_CONFIG = "/etc/condor/config.d/99-execd-rank-preemption.conf"
REFERENCE_SLOT = ("NUM_CPUS = 2\nMEMORY = 1024\nNUM_SLOTS_TYPE_1 = 1\nSLOT_TYPE_1 = 100%\n"
                  + SLOT_CONFIG)  # fmt: skip
SLEEP = {"job.sh": SLEEP_SCRIPT}


def slot_ad(pool: harness.Pool, probe: Any) -> dict[str, Any]:
    """The one slot's condor_status ad once probe(ad) holds."""
    ad: dict[str, Any] = wait_pool(pool, "the slot in condor_status", lambda s: len(s) == 1 and (
        ad := next(iter(s.values()))) and probe(ad) and ad)  # fmt: skip
    return ad


def claimant(ad: dict[str, Any]) -> str | None:
    """The claim's user as the slot's ad names it: RemoteOwner and RemoteUser are both
    the job's User (user@domain), as on condor_startd."""
    owner = ad.get("RemoteOwner")
    if owner is None or owner != ad.get("RemoteUser") or "@" not in owner:
        return None
    return str(owner).split("@")[0]


def evicted_lines(log: str) -> list[str]:
    """The 004 event's first line without its time stamp (code and subcode) and its
    Reason line."""
    event = log[log.index("\n004 ") + 1:].split("\n...", 1)[0].splitlines()
    reason = [line.strip() for line in event if line.strip().startswith("Reason:")]
    return [re.sub(r"^004 \(\S+\) \S+ \S+ ", "", event[0]), *reason]


def job_status(job: harness.SubmittedJob) -> int | None:
    ad = job.ad()
    return None if ad is None else int(ad["JobStatus"])


def preempted_for_rank(pool: harness.Pool, node: PoolNode | None) -> tuple[Any, ...]:
    """A low-ranked job runs on the pool's only slot; a job of RANKED preempts it. What
    users see: both user logs' events, the eviction's line, condor_q, condor_status."""
    low = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), SLEEP)
    high: harness.SubmittedJob | None = None
    low_pids: list[int] = []
    low_starter = 0
    try:
        low.wait_for_event("001", WAIT_S)
        if node is not None:  # execd's starter runs it, in the slot's cgroup, as nobody
            low_pids = running_in_cgroup(node, "slot1")
            low_starter = node.wait_for("starter_spawned", slot="slot1")["pid"]
        claimed = slot_ad(pool, lambda ad: claimant(ad) == harness.SUBMITTER)
        assert (claimed["State"], claimed["Activity"]) == ("Claimed", "Busy")
        assert claimed["CurrentRank"] == 0.0

        high = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), SLEEP, user=RANKED)
        low_log = low.wait_for_event("004", WAIT_S)
        high.wait_for_event("001", WAIT_S)
        # vanilla: the evicted job is requeued, Idle again (never completed)
        harness.wait_for("the evicted job Idle in condor_q", lambda: job_status(low) == 1,
                         WAIT_S, 0.2)  # fmt: skip
        taken = slot_ad(pool, lambda ad: claimant(ad) == RANKED)
        assert (taken["State"], taken["Activity"]) == ("Claimed", "Busy")
        assert taken["CurrentRank"] == 1.0
        # the negotiator's own words: it matched the ranked job preempting the submitter
        matched = [line for line in pool.daemon_log("NegotiatorLog").splitlines()
                   if f"Matched {high.cluster}.0 {RANKED}@" in line]  # fmt: skip
        assert matched and f"preempting {harness.SUBMITTER}@" in matched[0], matched
        if node is not None:
            assert_execd_preempted(node, low_pids, low_starter)
        return (timeless(low.events()), evicted_lines(low_log), timeless(high.events()))
    finally:
        for job, user in ((low, harness.SUBMITTER), (high, RANKED)):
            if job is not None:
                pool.tool("condor_rm", str(job.cluster), user=user)


def assert_execd_preempted(node: PoolNode, low_pids: list[int], low_starter: int) -> None:
    """execd's side: the machine-rank preemption, the slot's moves, the evicted job's
    starter and processes gone, the ranked job in the slot's cgroup."""
    preempting = node.wait_for("preempting_claim", slot="slot1",
                               why="preempting claim based on machine rank")  # fmt: skip
    node.wait_for("pool_claim_preempting", slot="slot1")
    evicted = node.wait_for("job_finished", slot="slot1")
    assert evicted["reason"] == "soft_killed", evicted
    events = node.events()
    spawned = [e for e in events if e["event"] == "starter_spawned" and e["slot"] == "slot1"]
    assert len(spawned) == 2 and spawned[0]["job"] == evicted["job"], spawned
    after = events[events.index(preempting):events.index(spawned[1])]
    moves = [e["new"] for e in after
             if e["event"] == "slot_state_changed" and e["slot"] == "slot1"]  # fmt: skip
    # the slot leaves through Preempting and the new claim holds it before it runs
    assert moves[:2] == ["Claimed/Retiring", "Preempting/Vacating"], moves
    assert moves[-2:] == ["Claimed/Idle", "Claimed/Busy"], moves
    assert evicted in after  # the evicted job ended before the ranked one started
    # the evicted job's processes are gone; the slot's job cgroup holds the new job's
    assert not [pid for pid in (*low_pids, low_starter) if Path(f"/proc/{pid}").exists()]
    high_pids = running_in_cgroup(node, "slot1")
    assert not set(high_pids) & set(low_pids)
    assert all(uid_of(pid) == NOBODY for pid in high_pids)


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


@contextlib.contextmanager
def reference_slot_layout(pool: harness.Pool) -> Iterator[None]:
    """condor_startd restarted with execd's slot and RANK, and back afterwards."""
    config = pool.host_path(REFERENCE_CONFIG)
    config.write_text(REFERENCE_SLOT)
    try:
        restart_startd(pool, lambda ad: ad.get("SlotType") == "Static" and ad.get("Rank"))
        yield
    finally:
        config.unlink()
        restart_startd(pool, lambda ad: ad.get("SlotType") != "Static" or not ad.get("Rank"))


def restart_startd(pool: harness.Pool, probe: Any) -> None:
    pool.tool("condor_restart", "-startd").check()
    slot_ad(pool, lambda ad: ad["State"] == "Unclaimed" and probe(ad))


def test_a_higher_ranked_job_preempts_a_running_job_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """The submitter's job runs on execd; execdrank's job preempts it: 004 and Idle for
    the first, 001 and Claimed/Busy with RemoteOwner execdrank@... for the second — the
    same user-log events as on condor_startd with the same slot and RANK."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), "STARTER_UPDATE_INTERVAL = 2\n" + SLOT_CONFIG)
        try:
            ours = preempted_for_rank(pool, node)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_slot_layout(reference):
        theirs = preempted_for_rank(reference, None)
    assert ours == theirs
    assert ours[0][-1] == "004" and "005" not in ours[0], ours
