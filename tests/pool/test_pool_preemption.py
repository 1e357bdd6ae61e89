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

The same on a dynamic slot of execd's default partitionable slot: the negotiator
preempts a claimed d-slot for rank as a static slot once the job fits nowhere else
(HTCondor 25.14.1's condor_startd: Claimed/Busy -> Preempting/Vacating -> Claimed/Idle
on the d-slot, which keeps its resources for the new claim).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from pool_node import WAIT_S, PoolNode, pool_slots, start_node, wait_pool
from test_pool_claims import JOB, offered_claim, request_claim
from test_pool_daemon_attrs import startd_counters
from test_pool_jobs import (
    NOBODY,
    PLAIN_SUBMIT,
    SLEEP_SCRIPT,
    running_in_cgroup,
    submit_files,
    timeless,
    uid_of,
)

from execd.wire.classad_codec import from_values
from execd.wire.commands import Reply

RANKED = "execdrank"
RANK_CONFIG = f'RANK = TARGET.Owner == "{RANKED}"\n'
SLOT_CONFIG = "SLOT_TYPE_1_PARTITIONABLE = False\n" + RANK_CONFIG
# condor_startd laid out as execd's node: one slot of 2 CPUs / 1024 MB.
REFERENCE_CONFIG = "/etc/condor/config.d/99-execd-rank-preemption.conf"
EARLY_PREEMPTION_CONFIG = "/etc/condor/config.d/98-execd-early-preemption.conf"
REFERENCE_NODE = "NUM_CPUS = 2\nMEMORY = 1024\nNUM_SLOTS_TYPE_1 = 1\nSLOT_TYPE_1 = 100%\n"
SLEEP = {"job.sh": SLEEP_SCRIPT}


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the two jobs meet: execd's slot config, condor_startd's alike, the slot
    the low-ranked job runs in, and that job's submit extras."""

    execd: str
    slot: str
    low_extra: str

    @property
    def reference(self) -> str:
        return REFERENCE_NODE + self.execd

    @property
    def partitionable(self) -> bool:
        return self.slot != "slot1"

    @property
    def retiring(self) -> bool:
        """Retirement time to give: the low-ranked job retires, and ends within it."""
        return "MAXJOBRETIREMENTTIME" in self.execd


STATIC = Layout(SLOT_CONFIG, "slot1", "")
# The default p-slot. The low-ranked job asks for all of it (2 CPUs), so the ranked job
# fits nowhere but in its d-slot: otherwise the negotiator gives it the p-slot's rest.
PARTITIONABLE = Layout("SLOT_TYPE_1_PARTITIONABLE = True\n" + RANK_CONFIG, "slot1_1",
                       "request_cpus = 2")  # fmt: skip
# An hour of retirement: the low-ranked job retires and is let end (RETIRE_SCRIPT).
RETIRING = Layout(SLOT_CONFIG + "MAXJOBRETIREMENTTIME = 3600\n", "slot1", "")
# Runs until the test lets it end: a mark at the same path on the host (execd's jobs)
# and in the chroot (condor_startd's), outside the /tmp a starter may give a job its own.
RETIRE_MARK = "/var/cache/execd-retire-{token}"
RETIRE_SCRIPT = f"""#!/bin/sh
echo started
while [ ! -e {RETIRE_MARK.format(token="$1")} ]; do sleep 0.1; done
echo retired
"""


def slot_ad(pool: harness.Pool, probe: Any, slot: str = "slot1") -> dict[str, Any]:
    """The condor_status ad of `slot` (slot1: the pool's only slot) once probe(ad) holds."""
    ad: dict[str, Any] = wait_pool(pool, f"{slot} in condor_status", lambda s: (
        ad := named(s, slot)) and (slot != "slot1" or len(s) == 1)
        and probe(ad) and ad)  # fmt: skip
    return ad


def named(slots: dict[str, dict[str, Any]], slot: str) -> dict[str, Any] | None:
    return next((ad for name, ad in slots.items() if name.split("@")[0] == slot), None)


def resources(ad: dict[str, Any]) -> tuple[Any, ...]:
    return ad["SlotType"], ad["Cpus"], ad["Memory"], ad["State"], ad["Activity"]


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


def until_busy(moves: list[str]) -> list[str]:
    return moves[:moves.index("Claimed/Busy") + 1] if "Claimed/Busy" in moves else moves


def execd_moves(node: PoolNode, slot: str) -> list[str]:
    """execd's slot's states from its rank preemption to the ranked job's Claimed/Busy."""
    events = node.events()
    start = next(i for i, e in enumerate(events)
                 if e["event"] == "preempting_claim" and e["slot"] == slot)  # fmt: skip
    return until_busy([e["new"] for e in events[start:]
                       if e["event"] == "slot_state_changed" and e["slot"] == slot])  # fmt: skip


def startd_moves(start_log: str, slot: str, basis: str = "machine rank") -> list[str]:
    """The same from condor_startd's StartLog, which names only what changed (`basis`:
    its "preempting claim based on ..." words, "machine rank" or "user priority")."""
    moves: list[str] = []
    current: str | None = None
    for line in start_log.splitlines():
        if f" {slot}: State change: preempting claim based on {basis}" in line:
            current = "Claimed/Busy"
        changed = re.search(rf" {slot}: Changing (state and activity|state|activity): "
                            r"(\S+) -> (\S+)$", line)  # fmt: skip
        if current is None or changed is None:
            continue
        state, activity = current.split("/")
        what, new = changed[1], changed[3]
        current = {"state and activity": new, "state": f"{new}/{activity}",
                   "activity": f"{state}/{new}"}[what]  # fmt: skip
        moves.append(current)
    return until_busy(moves)


def job_status(job: harness.SubmittedJob) -> int | None:
    ad = job.ad()
    return None if ad is None else int(ad["JobStatus"])


@contextlib.contextmanager
def ranked_claim_waiting(pool: harness.Pool, script: str, ranked_extra: str = "",
                         ) -> Iterator[tuple[harness.SubmittedJob, harness.SubmittedJob,
                                             dict[str, Any], Callable[[], None]]]:  # fmt: skip
    """The submitter's job (`script`, which runs until let end) runs in slot1; execdrank's
    (ranked higher; `ranked_extra` in its submit file) preempts it, and its claim waits
    while the job retires. Yields (the retiring job, the ranked job, the retiring slot's
    ad, what lets the retiring job end); both jobs are removed after."""
    token = f"{os.getpid()}-{pool._jobs}"
    marks = [Path(RETIRE_MARK.format(token=token)),
             pool.host_path(RETIRE_MARK.format(token=token))]  # fmt: skip
    low = submit_files(pool, PLAIN_SUBMIT.format(args=token, extra=""), {"job.sh": script})
    high: harness.SubmittedJob | None = None
    try:
        low.wait_for_event("001", WAIT_S)
        high = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=ranked_extra), SLEEP,
                            user=RANKED)  # fmt: skip
        retiring = slot_ad(pool, lambda ad: ad["Activity"] == "Retiring"
                           and claimant(ad) == harness.SUBMITTER)  # fmt: skip
        assert retiring.get("PreemptingUser", "").startswith(f"{RANKED}@"), retiring

        def let_end() -> None:
            for mark in marks:
                mark.touch()

        yield low, high, retiring, let_end
    finally:
        for mark in marks:
            mark.unlink(missing_ok=True)
        pool.tool("condor_rm", str(low.cluster))
        if high is not None:
            pool.tool("condor_rm", str(high.cluster), user=RANKED)


def slot1_moves(pool: harness.Pool, node: PoolNode | None, start_log: int) -> list[str]:
    """slot1's moves since `start_log` (the StartLog's length then): condor_startd's from
    its StartLog, execd's from its log."""
    if node is None:
        return startd_moves(pool.daemon_log("StartLog")[start_log:], "slot1")
    return execd_moves(node, "slot1")


def preempted_by(pool: harness.Pool, node: PoolNode | None, layout: Layout = STATIC,
                 *, by: str = RANKED, rank: float = 1.0,
                 basis: str = "machine rank") -> tuple[Any, ...]:  # fmt: skip
    """A low-ranked job of the submitter runs in layout.slot; a job of `by` preempts it
    (its claim of `rank`, for `basis`: "machine rank", or "user priority" where `by` has
    the same rank and a far better priority). What users see: both user logs' events,
    the eviction's line, condor_q, condor_status (on a p-slot: the d-slot's and the
    p-slot's resources and states), and the slot's states from the preemption to the
    new job's Claimed/Busy. With retirement time (layout.retiring) the first job retires
    and ends on its own within it."""
    start_log = len(pool.daemon_log("StartLog"))
    token = f"{os.getpid()}-{pool._jobs}"
    marks = [Path(RETIRE_MARK.format(token=token)),
             pool.host_path(RETIRE_MARK.format(token=token))]  # fmt: skip
    script = {"job.sh": RETIRE_SCRIPT} if layout.retiring else SLEEP
    low = submit_files(pool, PLAIN_SUBMIT.format(args=token, extra=layout.low_extra), script)
    high: harness.SubmittedJob | None = None
    low_pids: list[int] = []
    low_starter = 0
    try:
        low.wait_for_event("001", WAIT_S)
        if node is not None and not layout.retiring:  # in the slot's cgroup, as nobody
            low_pids = running_in_cgroup(node, layout.slot)
            low_starter = node.wait_for("starter_spawned", slot=layout.slot)["pid"]
        claimed = slot_ad(pool, lambda ad: claimant(ad) == harness.SUBMITTER, layout.slot)
        assert (claimed["State"], claimed["Activity"]) == ("Claimed", "Busy")
        assert claimed["CurrentRank"] == 0.0

        high = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), SLEEP, user=by)
        if layout.retiring:  # the running job keeps its slot, retiring, until it ends
            retiring = slot_ad(pool, lambda ad: ad["Activity"] == "Retiring"
                               and claimant(ad) == harness.SUBMITTER, layout.slot)  # fmt: skip
            # what a negotiator not considering early preemption leaves such a slot for
            assert 3500 < retiring["RetirementTimeRemaining"] <= 3600, retiring
            assert retiring.get("PreemptingUser", "").startswith(f"{by}@"), retiring
            assert "001" not in high.events()
            for mark in marks:
                mark.touch()
            low_log = low.wait_for_event("005", WAIT_S)
        else:
            low_log = low.wait_for_event("004", WAIT_S)
        high.wait_for_event("001", WAIT_S)
        if not layout.retiring:  # vanilla: the evicted job is requeued, Idle again
            harness.wait_for("the evicted job Idle in condor_q", lambda: job_status(low) == 1,
                             WAIT_S, 0.2)  # fmt: skip
        taken = slot_ad(pool, lambda ad: claimant(ad) == by, layout.slot)
        assert (taken["State"], taken["Activity"]) == ("Claimed", "Busy")
        assert taken["CurrentRank"] == rank
        # the negotiator's own words: it matched `by`'s job preempting the submitter
        matched = [line for line in pool.daemon_log("NegotiatorLog").splitlines()
                   if f"Matched {high.cluster}.0 {by}@" in line]  # fmt: skip
        assert matched and f"preempting {harness.SUBMITTER}@" in matched[0], matched
        if node is None:
            moves = startd_moves(pool.daemon_log("StartLog")[start_log:], layout.slot, basis)
        else:
            if not layout.retiring:
                assert_execd_preempted(node, low_pids, low_starter, layout.slot, basis)
            moves = execd_moves(node, layout.slot)
        ads: tuple[Any, ...] = ()
        if layout.partitionable:
            pslot = named(pool_slots(pool), "slot1") or {}
            ads = (resources(claimed), resources(taken), resources(pslot))
        evicted = [] if layout.retiring else evicted_lines(low_log)
        return (timeless(low.events()), evicted, timeless(high.events()), ads, moves)
    finally:
        for mark in marks:
            mark.unlink(missing_ok=True)
        for job, user in ((low, harness.SUBMITTER), (high, by)):
            if job is not None:
                pool.tool("condor_rm", str(job.cluster), user=user)


def assert_execd_preempted(node: PoolNode, low_pids: list[int], low_starter: int,
                           slot: str, basis: str = "machine rank") -> None:  # fmt: skip
    """execd's side: the preemption (for `basis`), the evicted job's starter and
    processes gone, the preempting job in the slot's cgroup."""
    preempting = node.wait_for("preempting_claim", slot=slot,
                               why=f"preempting claim based on {basis}")  # fmt: skip
    node.wait_for("pool_claim_preempting", slot=slot)
    evicted = node.wait_for("job_finished", slot=slot)
    assert evicted["reason"] == "soft_killed", evicted
    events = node.events()
    spawned = [e for e in events if e["event"] == "starter_spawned" and e["slot"] == slot]
    assert len(spawned) == 2 and spawned[0]["job"] == evicted["job"], spawned
    # the evicted job ended before the ranked one started
    assert evicted in events[events.index(preempting):events.index(spawned[1])]
    # the evicted job's processes are gone; the slot's job cgroup holds the new job's
    assert not [pid for pid in (*low_pids, low_starter) if Path(f"/proc/{pid}").exists()]
    high_pids = running_in_cgroup(node, slot)
    assert not set(high_pids) & set(low_pids)
    assert all(uid_of(pid) == NOBODY for pid in high_pids)


def test_a_preempting_claim_id_of_a_lower_rank_is_refused_an_equal_one_preempts(
        pool: harness.Pool) -> None:  # fmt: skip
    """The claimed slot's offer (its preempting claim id, which only the negotiator hands
    out) claims for a job the slot ranks no lower than the current claim's, as on
    condor_startd: a lower RANK is refused and the claim stays; an equal one preempts
    for user priority (the idle claim at once) and is counted so."""
    ranked = from_values({**dict(JOB.items()), "Owner": RANKED})
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), "SLOT_TYPE_1_PARTITIONABLE = False\n"
                                           f'RANK = TARGET.Owner == "{RANKED}"\n')  # fmt: skip
        (name,) = wait_pool(pool, "execd's static slot", lambda s: s)
        offer = asyncio.run(offered_claim(pool))
        claim = asyncio.run(request_claim(node.address(), offer, job=ranked))
        assert claim.status == Reply.OK
        preempting = harness.wait_for("the preempting claim id advertised",
                                      lambda: (o := asyncio.run(offered_claim(pool))) != offer
                                      and o, WAIT_S, 0.2)  # fmt: skip
        # a lower rank (0) than the current claim's (1): refused, the claim stays
        assert asyncio.run(request_claim(node.address(), preempting)).status == Reply.NOT_OK
        refused = node.wait_for("pool_claim_refused", slot="slot1")
        assert refused["why"] == ("slot1: claim refused: slot is Claimed (a preempting claim "
                                  "needs a RANK no lower than the claim's 1, not 0)"), refused
        assert node.slots()[name]["State"] == "Claimed"
        assert not any(e["event"] in ("preempting_claim", "pool_claim_preempting")
                       for e in node.events())  # fmt: skip
        assert asyncio.run(offered_claim(pool)) == preempting  # still on offer
        assert preempting[-64:] not in node.log.read_text()
        # an equal rank: preemption for user priority; the idle claim goes at once
        assert asyncio.run(request_claim(node.address(), preempting, job=ranked)).status \
            == Reply.OK  # fmt: skip
        node.wait_for("preempting_claim", slot="slot1", basis="user_priority")
        assert startd_counters(pool, JobUserPrioPreemptions=1)["JobRankPreemptions"] == 0
        assert node.slots()[name]["State"] == "Claimed"
        assert node.stop() == 0


@contextlib.contextmanager
def reference_slot_layout(pool: harness.Pool, layout: Layout) -> Iterator[None]:
    """condor_startd restarted with execd's slot and RANK, and back afterwards."""
    config = pool.host_path(REFERENCE_CONFIG)
    config.write_text(layout.reference)
    kind = "Partitionable" if layout.partitionable else "Static"
    try:
        restart_startd(pool, lambda ad: ad.get("SlotType") == kind and ad.get("Rank"))
        yield
    finally:
        config.unlink()
        restart_startd(pool, lambda ad: ad.get("SlotType") != kind or not ad.get("Rank"))


@contextlib.contextmanager
def early_preemption(pool: harness.Pool) -> Iterator[None]:
    """The negotiator preempts slots with retirement left (by default it leaves out every
    slot whose RetirementTimeRemaining is above 0, on execd as on condor_startd)."""
    config = pool.host_path(EARLY_PREEMPTION_CONFIG)
    config.write_text("NEGOTIATOR_CONSIDER_EARLY_PREEMPTION = True\n")
    try:
        reconfig_negotiator(pool, True)
        yield
    finally:
        config.unlink()
        reconfig_negotiator(pool, False)


def reconfig_negotiator(pool: harness.Pool, early: bool) -> None:
    """condor_reconfig, then the running negotiator's own value (its default: false)."""
    pool.tool("condor_reconfig", "-negotiator").check()
    harness.wait_for(f"the negotiator's NEGOTIATOR_CONSIDER_EARLY_PREEMPTION {early}",
                     lambda: (pool.tool("condor_config_val", "-negotiator",
                                        "NEGOTIATOR_CONSIDER_EARLY_PREEMPTION"
                                        ).stdout.strip().lower() == "true") == early,
                     WAIT_S, 0.2)  # fmt: skip


@contextlib.contextmanager
def reference_config(pool: harness.Pool, name: str, text: str,
                     applied: Callable[[dict[str, Any]], bool]) -> Iterator[None]:
    """condor_startd restarted with `text` as config.d/`name` (its slot ad then shows
    `applied`), and restarted without it afterwards."""
    config = pool.host_path(f"/etc/condor/config.d/{name}")
    config.write_text(text)
    try:
        restart_startd(pool, applied)
        yield
    finally:
        config.unlink()
        restart_startd(pool, lambda ad: not applied(ad))


def restart_startd(pool: harness.Pool, probe: Any) -> None:
    pool.tool("condor_restart", "-startd").check()
    slot_ad(pool, lambda ad: ad["State"] == "Unclaimed" and probe(ad))


@pytest.mark.parametrize("layout", [STATIC, PARTITIONABLE], ids=["static", "dynamic"])
def test_a_higher_ranked_job_preempts_a_running_job_as_on_condor_startd(
        running_pool: harness.RunningPool, layout: Layout) -> None:  # fmt: skip
    """The submitter's job runs on execd; execdrank's job preempts it: 004 and Idle for
    the first, 001 and Claimed/Busy with RemoteOwner execdrank@... for the second — the
    same user-log events as on condor_startd with the same slot and RANK. On a p-slot
    (dynamic): the low-ranked job takes the whole p-slot, so the ranked job fits only in
    its d-slot, which the negotiator preempts for rank as a static slot; the d-slot keeps
    its resources for the new claim, as on condor_startd."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), "STARTER_UPDATE_INTERVAL = 2\n" + layout.execd)
        try:
            ours = preempted_by(pool, node, layout)
            our_counters = startd_counters(pool, JobStarts=2, JobRankPreemptions=1)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_slot_layout(reference, layout):
        theirs = preempted_by(reference, None, layout)
        their_counters = startd_counters(reference, JobStarts=2, JobRankPreemptions=1)
    assert ours == theirs
    # the startd's counters (execd/daemon/startd_stats.py): one preemption, for rank
    assert our_counters == their_counters
    assert {n: our_counters[n] for n in ("JobPreemptions", "RecentJobRankPreemptions",
                                         "JobUserPrioPreemptions", "ClaimRequests")} \
        == {"JobPreemptions": 1, "RecentJobRankPreemptions": 1, "JobUserPrioPreemptions": 0,
            "ClaimRequests": 2}  # fmt: skip
    assert ours[0][-1] == "004" and "005" not in ours[0], ours
    # condor_startd 25 retires no job that has no retirement time (MaxJobRetirementTime
    # 0): the slot leaves Claimed/Busy straight for Preempting, then the new claim holds
    # it before its job runs
    assert ours[-1] == ["Preempting/Vacating", "Claimed/Idle", "Claimed/Busy"], ours


def test_a_higher_ranked_job_waits_for_a_job_ending_within_its_retirement(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """With MAXJOBRETIREMENTTIME 3600 (and a negotiator that preempts slots with
    retirement left) the running job retires for the ranked one and ends on its own
    (005, not 004); only then does the ranked job run. The slot's states and the user
    logs are those of condor_startd configured alike."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp, early_preemption(pool):
        node = start_node(pool, Path(tmp), "STARTER_UPDATE_INTERVAL = 2\n" + RETIRING.execd)
        try:
            ours = preempted_by(pool, node, RETIRING)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_slot_layout(reference, RETIRING), early_preemption(reference):
        theirs = preempted_by(reference, None, RETIRING)
    assert ours == theirs
    assert ours[0][-1] == "005" and "004" not in ours[0], ours
    # the job ends while retiring; its starter's exit hands the slot to the new claim
    assert ours[-1] == ["Claimed/Retiring", "Claimed/Cleaning", "Preempting/Vacating",
                        "Claimed/Idle", "Claimed/Busy"], ours  # fmt: skip
