"""A preempting claim's life in the daemon: its lease, how it ends, and a restart.

As condor_startd 25 does (src/condor_startd.V6): a preempting claim waiting for the
slot's job to retire has no lease running (its ClaimLease timer starts when it becomes
the slot's claim, in Claim::beginClaim); once it holds the slot its lease is its own
(the job's JobLeaseDuration, else MAX_CLAIM_ALIVES_MISSED x its ALIVE_INTERVAL). When
the engine drops a waiting one (START false for its job once the slot is free, e.g. a
drain's; a shutdown; a better preempting claim), the daemon forgets it at once: gone
from the JobManager and the store (the pool's REQUEST_CLAIM is then refused, as
remove_pre's refuseClaimRequest). A restart restores the claim that
took the slot with its own lease, and does not restore a claim that was still waiting
(its holder's request died with the old daemon).

The daemon is built as `execd run` builds it, without its cgroup tree: no job runs here;
the engine is told that one does (activate, its starter's exit), and time is passed to
it as to any policy evaluation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from execd.claims.ids import parse_claim_id
from execd.daemon.policy_glue import now
from execd.daemon.recovery import recover
from execd.daemon.runtime import Daemon
from execd.policy import actions as act
from execd.policy.commands import kill_claim
from execd.policy.slot import Now
from tests.component.in_process_daemon import daemon_without_cgroups

# one static slot that ranks boss's jobs higher, and an hour of retirement
CONFIG = ('SLOT_TYPE_1_PARTITIONABLE = False\nRANK = TARGET.Owner == "boss"\n'
          "MAXJOBRETIREMENTTIME = 3600\n")
ALICE = {"Owner": "alice", "Cmd": "/bin/sleep", "JobLeaseDuration": 1200}
BOSS = {"Owner": "boss", "Cmd": "/bin/sleep", "JobLeaseDuration": 60}


def later(daemon: Daemon, seconds: float) -> Now:
    moment = now()
    return Now(moment.mono + seconds, moment.wall + seconds)


def run(daemon: Daemon, actions: list[Any]) -> None:
    """The engine's actions, but no starter: none can run without a cgroup tree."""
    daemon.execute([a for a in actions if not isinstance(a, act.SpawnStarter)])


def state(daemon: Daemon) -> str:
    slot = daemon.engine.slots["slot1"]
    return f"{slot.state.value}/{slot.activity.value}"


def ad(daemon: Daemon) -> dict[str, Any]:
    return next(a for a in daemon.ads() if str(a["Name"]).startswith("slot1@"))


def held(daemon: Daemon) -> set[str]:
    """The JobManager's claims, by public session id (never a secret in a message)."""
    return {claim.session_id for _slot, claim in daemon.jobs.claims.values()}


def session(claim_id: str) -> str:
    return parse_claim_id(claim_id).session_id


def stored(daemon: Daemon) -> dict[str, float]:
    """The store's claims: session id -> lease duration."""
    return {c.session_id: c.lease_duration for c in daemon.jobs.store.claims()}


def busy_alice_then_boss(daemon: Daemon) -> tuple[dict[str, Any], dict[str, Any]]:
    """alice's job runs (Claimed/Busy); boss's claim (a higher RANK) makes it retire."""
    alice = daemon.jobs.request_claim("slot1", ALICE)
    accepted, actions = daemon.engine.activate("slot1", ALICE, later(daemon, 0))
    assert accepted
    run(daemon, actions)
    boss = daemon.jobs.request_claim("slot1", BOSS)
    assert boss["preempts_for"] == "rank"
    assert state(daemon) == "Claimed/Retiring"
    return alice, boss


def scenario(tmp_path: Path, body: Callable[[Daemon], None], config: str = CONFIG) -> None:
    async def inner() -> None:
        daemon = daemon_without_cgroups(tmp_path, config)
        try:
            body(daemon)
        finally:
            daemon.jobs.store.close()

    asyncio.run(inner())  # the daemon's parts expect a running loop


def test_a_waiting_preempting_claims_lease_does_not_run_until_it_holds_the_slot(
        tmp_path: Path) -> None:  # fmt: skip
    def body(daemon: Daemon) -> None:
        _alice, boss = busy_alice_then_boss(daemon)
        # boss's lease (60 s) would be long over; alice's (1200 s) is not
        run(daemon, daemon.engine.evaluate(later(daemon, 600)))
        assert state(daemon) == "Claimed/Retiring"  # still retiring for boss
        assert session(boss["claim_id"]) in held(daemon)
        assert len(stored(daemon)) == 2
        waiting = daemon.engine.slots["slot1"].preempting_claim
        assert waiting is not None and waiting.id.session_id == session(boss["claim_id"])
        # the job ends; its starter's exit hands the slot to boss's claim
        run(daemon, daemon.engine.job_exited("slot1", later(daemon, 700)))
        run(daemon, daemon.engine.starter_exited("slot1", later(daemon, 700)))
        for _ in range(2):
            run(daemon, daemon.engine.evaluate(later(daemon, 700)))
        assert state(daemon) == "Claimed/Idle"
        assert held(daemon) == {session(boss["claim_id"])}
        assert ad(daemon)["ClaimLeaseDuration"] == 60
        # its lease runs from the takeover: not over 59 s later, over 61 s later
        run(daemon, daemon.engine.evaluate(later(daemon, 759)))
        assert state(daemon) == "Claimed/Idle"
        run(daemon, daemon.engine.evaluate(later(daemon, 761)))
        assert state(daemon) != "Claimed/Idle"

    scenario(tmp_path, body)


def test_a_preempting_claim_a_drain_refuses_is_forgotten_at_the_takeover(
        tmp_path: Path) -> None:  # fmt: skip
    def body(daemon: Daemon) -> None:
        alice, boss = busy_alice_then_boss(daemon)
        run(daemon, daemon.engine.drain("graceful", later(daemon, 1), reason="test"))
        assert state(daemon) == "Claimed/Retiring"  # alice's job retires for the drain
        # boss's claim waits on, as condor_startd's r_pre through a drain
        assert held(daemon) == {session(alice["claim_id"]), session(boss["claim_id"])}
        run(daemon, daemon.engine.job_exited("slot1", later(daemon, 2)))
        run(daemon, daemon.engine.starter_exited("slot1", later(daemon, 2)))
        # the drain's START refuses it: nothing of it is left, a command naming it fails
        assert daemon.engine.slots["slot1"].preempting_claim is None
        assert held(daemon) == set()
        assert stored(daemon) == {}
        assert state(daemon).startswith("Drained/")

    scenario(tmp_path, body)


def test_the_claim_that_took_the_slot_has_its_own_lease_after_a_restart(
        tmp_path: Path) -> None:  # fmt: skip
    def first(daemon: Daemon) -> None:
        alice, boss = busy_alice_then_boss(daemon)
        run(daemon, daemon.engine.job_exited("slot1", later(daemon, 0)))
        run(daemon, daemon.engine.starter_exited("slot1", later(daemon, 0)))
        assert state(daemon) == "Claimed/Idle"
        assert held(daemon) == {session(boss["claim_id"])}, alice["slot"]
        assert ad(daemon)["ClaimLeaseDuration"] == 60
        assert list(stored(daemon).values()) == [60.0]  # its own, not alice's 1200
        assert [c.preempting for c in daemon.jobs.store.claims()] == [False]  # the slot's

    def second(daemon: Daemon) -> None:
        assert recover(daemon.jobs)["claims"] == 1
        assert state(daemon) == "Claimed/Idle"
        assert ad(daemon)["ClaimLeaseDuration"] == 60
        run(daemon, daemon.engine.evaluate(later(daemon, 61)))  # nobody renewed it
        assert state(daemon) != "Claimed/Idle"

    scenario(tmp_path, first)
    scenario(tmp_path, second)


@pytest.mark.parametrize("grants", ["in_order", "same_instant", "clock_stepped_back"])
def test_a_restart_does_not_restore_a_preempting_claim_still_waiting(
        tmp_path: Path, grants: str) -> None:  # fmt: skip
    """Which claim is waiting comes from the store's flag, not from the grants' wall
    times: the slot's own claim is restored (its lease) and the waiting one is not, also
    when boss's claim was granted at the same wall time as alice's or, the wall clock
    stepped back an hour between the two grants, before it (before the flag, the
    recovered daemon gave the slot to boss's claim and dropped alice's)."""
    claims: dict[str, str] = {}

    def first(daemon: Daemon) -> None:
        alice, boss = busy_alice_then_boss(daemon)
        claims.update(alice=session(alice["claim_id"]), boss=session(boss["claim_id"]))
        store = daemon.jobs.store
        if grants != "in_order":  # what the wall clock wrote for boss's grant
            (alices,) = [c for c in store.claims() if c.session_id == claims["alice"]]
            wall = alices.granted - 3600 if grants == "clock_stepped_back" else alices.granted
            store.db.execute("UPDATE claims SET granted=? WHERE session_id=?",
                             (wall, claims["boss"]))  # fmt: skip
            if grants == "same_instant":  # alice's row written last: read back after boss's
                store.remove_claim(claims["alice"])
                store.add_claim(alices)
            assert [c.session_id for c in store.claims()] == [claims["boss"], claims["alice"]]
        assert {c.session_id: c.preempting for c in daemon.jobs.store.claims()} == {
            claims["alice"]: False, claims["boss"]: True}

    def second(daemon: Daemon) -> None:
        assert recover(daemon.jobs)["claims"] == 1
        assert held(daemon) == {claims["alice"]}  # the slot's own claim
        slot = daemon.engine.slots["slot1"]
        assert slot.claim is not None and slot.claim.id.session_id == claims["alice"]
        assert slot.preempting_claim is None
        assert ad(daemon)["ClaimLeaseDuration"] == 1200
        assert len(stored(daemon)) == 1

    scenario(tmp_path, first)
    scenario(tmp_path, second)


def test_a_killed_claim_takes_the_preempting_claim_waiting_on_it_along(tmp_path: Path) -> None:
    """condor_startd's kill_claim (pslot preemption) ends the slot's claim at once; the
    preempting claim waiting for it goes too, and is forgotten at once (its REQUEST_CLAIM
    refused), not left in the JobManager until the slot is gone."""

    def body(daemon: Daemon) -> None:
        alice, boss = busy_alice_then_boss(daemon)
        run(daemon, kill_claim(daemon.engine, "slot1", later(daemon, 1), "pslot_preemption"))
        assert daemon.engine.slots["slot1"].preempting_claim is None
        assert session(boss["claim_id"]) not in held(daemon)
        assert session(boss["claim_id"]) not in stored(daemon)
        assert state(daemon).startswith("Preempting/")
        assert session(alice["claim_id"]) in held(daemon)  # until its job is gone

    scenario(tmp_path, body)


def test_a_claim_granted_on_a_backfill_slot_survives_a_restart(tmp_path: Path) -> None:
    """A claim on a Backfill slot waits only for the backfill client to exit; its
    REQUEST_CLAIM was answered at once, so it is the slot's claim, not a waiting
    preempting one: a restart before the client exits restores it (it was dropped as
    preempting_claim_not_restored while the schedd held it)."""
    config = "ENABLE_BACKFILL = True\nSTART_BACKFILL = True\n"
    claims: dict[str, str] = {}

    def first(daemon: Daemon) -> None:
        for _ in range(2):
            run(daemon, daemon.engine.evaluate(later(daemon, 0)))
        assert state(daemon) == "Backfill/Busy"
        alice = daemon.jobs.request_claim("slot1", ALICE)
        claims["alice"] = session(alice["claim_id"])
        assert state(daemon) == "Backfill/Killing"  # the client is being killed
        assert {c.session_id: c.preempting for c in daemon.jobs.store.claims()} == {
            claims["alice"]: False}

    def second(daemon: Daemon) -> None:
        assert recover(daemon.jobs)["claims"] == 1
        assert held(daemon) == {claims["alice"]}
        assert state(daemon) == "Claimed/Idle"
        assert ad(daemon)["ClaimLeaseDuration"] == 1200

    scenario(tmp_path, first, CONFIG + config)
    scenario(tmp_path, second, CONFIG + config)


def test_a_preempting_claim_that_took_a_dslot_survives_a_restart(tmp_path: Path) -> None:
    """On a partitionable slot boss's claim preempts alice's d-slot (a higher RANK) and
    takes it when her job ends; the d-slot's resources were only in alice's claim's
    record, which went with her claim: a restart carves the d-slot again from boss's
    (before, claim_not_restored "no slot named slot1_1 any more", the resources went back
    to the p-slot and a job on boss's claim was killed as claimless)."""
    config = 'RANK = TARGET.Owner == "boss"\nMAXJOBRETIREMENTTIME = 3600\n'
    claims: dict[str, str] = {}

    def first(daemon: Daemon) -> None:
        alice = daemon.jobs.request_claim("slot1", {**ALICE, "RequestCpus": 2})
        dslot = alice["slot"]
        assert dslot == "slot1_1"
        run(daemon, daemon.engine.activate(dslot, ALICE, later(daemon, 0))[1])
        boss = daemon.jobs.request_claim(dslot, BOSS)
        assert boss["preempts_for"] == "rank" and boss["slot"] == dslot
        claims["boss"] = session(boss["claim_id"])
        run(daemon, daemon.engine.job_exited(dslot, later(daemon, 1)))
        run(daemon, daemon.engine.starter_exited(dslot, later(daemon, 1)))
        for _ in range(2):
            run(daemon, daemon.engine.evaluate(later(daemon, 1)))
        slot = daemon.engine.slots[dslot]
        assert slot.claim is not None and slot.claim.id.session_id == claims["boss"]
        assert held(daemon) == {claims["boss"]}
        accepted, actions = daemon.engine.activate(dslot, BOSS, later(daemon, 2))
        assert accepted
        run(daemon, actions)

    def second(daemon: Daemon) -> None:
        assert recover(daemon.jobs)["claims"] == 1
        assert held(daemon) == {claims["boss"]}
        slot = daemon.engine.slots["slot1_1"]
        assert slot.claim is not None and slot.claim.id.session_id == claims["boss"]
        assert state(daemon) == "Unclaimed/Idle"  # the p-slot
        dslot = next(a for a in daemon.ads() if str(a["Name"]).startswith("slot1_1@"))
        assert dslot["Cpus"] == 2 and ad(daemon)["Cpus"] == 2  # 2 of the 4 carved still

    scenario(tmp_path, first, config)
    scenario(tmp_path, second, config)
