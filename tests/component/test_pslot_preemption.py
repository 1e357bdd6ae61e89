"""A REQUEST_CLAIM that preempts d-slots of the p-slot it claims (the negotiator's
ALLOW_PSLOT_PREEMPTION): which claim ids execd accepts, what it refuses and says so,
and what it kills (execd/daemon/pool_pslot_preemption.py).

The daemon is built as `execd run` builds it, without its cgroup tree: its d-slots are
claimed through the JobManager (no job runs), and a job's start is the policy engine's
activation alone. The pool member is a stand-in holding what the module reads: each
slot's offer (its preempting claim id) and the state-change event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from execd import classads
from execd.claims.ids import ClaimId, ClaimIdFactory
from execd.daemon.job import Job
from execd.daemon.policy_glue import now
from execd.daemon.pool_pslot_preemption import PslotPreemption
from execd.daemon.runtime import Daemon
from execd.policy import actions as act
from execd.policy.commands import kill_claim
from execd.wire.server import Peer
from tests.component.in_process_daemon import daemon_without_cgroups

# two p-slots of 2 CPUs; an hour of retirement for a running job
CONFIG = ("NUM_SLOTS_TYPE_1 = 2\nSLOT_TYPE_1 = 50%\nSLOT_TYPE_1_PARTITIONABLE = True\n"
          "MAXJOBRETIREMENTTIME = 3600\n")  # fmt: skip
JOB = {"Cmd": "/bin/true", "RequestCpus": 1, "RequestMemory": 64}
SCHEDD = Peer(user="condor@pool", method="FS", sid="sid-1", address="127.0.0.1:4242")


class Member:
    """What PslotPreemption reads of the pool member."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.ids = ClaimIdFactory("<127.0.0.1:9618>", 1_700_000_000)
        self.offers: dict[str, ClaimId] = {}
        self.state_changed = asyncio.Event()

    def changed(self) -> None:
        self.state_changed.set()

    def replace_offer(self, slot: str) -> None:
        self.offers[slot] = self.ids.new()

    def offer_for(self, claim_id: str) -> str | None:
        return next((s for s, offer in self.offers.items() if offer.full() == claim_id), None)

    def claimant(self, name: str) -> dict[str, Any]:  # the daemon's ads ask
        return {}

    def claim(self, pslot: str) -> tuple[str, str]:
        """A d-slot of `pslot` claimed; its name and current claim id (its offer too)."""
        granted = self.daemon.jobs.request_claim(pslot, dict(JOB))
        name = str(granted["slot"])
        self.offers[name] = self.ids.new()
        return name, str(granted["claim_id"])


def states(daemon: Daemon) -> dict[str, str]:
    return {n: f"{s.state.value}/{s.activity.value}" for n, s in daemon.engine.slots.items()}


def refused(member: Member, pslot: str, claim_ids: list[str]) -> tuple[bool, list[Any]]:
    with capture_logs() as events:
        taken = asyncio.run(PslotPreemption(member).take_back(pslot, claim_ids, SCHEDD))  # type: ignore[arg-type]
    return taken, events


@pytest.fixture
def member(tmp_path: Path) -> Any:
    async def build() -> Member:
        daemon = daemon_without_cgroups(tmp_path, CONFIG)
        return Member(daemon)

    built = asyncio.run(build())  # the daemon's parts are built under a running loop
    yield built
    built.daemon.jobs.store.close()


def test_each_refusal_names_its_problem_kills_nothing_and_logs_no_secret(member: Member
                                                                         ) -> None:  # fmt: skip
    first, first_claim = member.claim("slot1")
    second, _ = member.claim("slot1")
    other, other_claim = member.claim("slot2")
    unknown = member.ids.new()  # well formed, never given to any slot
    before = states(member.daemon)
    cases = {
        "unknown": ([member.offers[first].full(), unknown.full()],
                    f"preempting claim 2 of 2 ({unknown.session_id}) is no claim of any slot"),
        "malformed": (["not a claim id"],
                      "preempting claim 1 of 1 (a malformed claim id) is no claim of any slot"),
    }
    for claim_ids, why in cases.values():
        taken, events = refused(member, "slot1", claim_ids)
        assert not taken
        (event,) = [e for e in events if e["event"] == "pslot_preemption_refused"]
        assert event["why"] == why
        assert (event["slot"], event["user"], event["session"]) == ("slot1", SCHEDD.user, "sid-1")
        assert not [c for c in claim_ids if len(c) > 64 and c[-64:] in repr(events)]
    # a d-slot of slot2, by its current claim id: not slot1's to take
    taken, events = refused(member, "slot1", [member.offers[second].full(), other_claim])
    (event,) = [e for e in events if e["event"] == "pslot_preemption_refused"]
    assert not taken and event["why"].endswith(f"is {other}'s, not a dynamic slot of slot1")
    assert event["why"].startswith("preempting claim 2 of 2 (")
    assert other_claim[-64:] not in repr(events)
    # the p-slot's own offer
    member.offers["slot1"] = member.ids.new()
    taken, events = refused(member, "slot1", [member.offers["slot1"].full()])
    (event,) = [e for e in events if e["event"] == "pslot_preemption_refused"]
    assert not taken and event["why"].endswith("is slot1's, not a dynamic slot of slot1")
    assert states(member.daemon) == before  # nothing was killed
    assert first_claim in member.daemon.jobs.claims


def test_a_dslot_with_retirement_time_left_is_refused_and_nothing_is_killed(member: Member
                                                                            ) -> None:  # fmt: skip
    idle, _ = member.claim("slot1")
    running, running_claim = member.claim("slot1")
    started, _actions = member.daemon.engine.activate(running, dict(JOB), now())
    assert started and states(member.daemon)[running] == "Claimed/Busy"
    taken, events = refused(member, "slot1", [member.offers[idle].full(), running_claim])
    (event,) = [e for e in events if e["event"] == "pslot_preemption_refused"]
    assert not taken
    assert re.fullmatch(rf"{running} still has (3600|359\d) s of retirement time: it cannot "
                        "be preempted at once", event["why"]), event  # fmt: skip
    assert states(member.daemon)[idle] == "Claimed/Idle"  # the other was not killed either


def test_an_aborted_request_takes_the_pslot_through_owner_with_a_new_offer(member: Member
                                                                         ) -> None:  # fmt: skip
    """condor_startd's abort_claim after a refusal: the p-slot Unclaimed -> Owner ->
    Unclaimed at once (IS_OWNER false), a new offer for it, its d-slots untouched."""
    dslot, _ = member.claim("slot1")
    member.offers["slot1"] = used = member.ids.new()
    with capture_logs() as events:
        PslotPreemption(member).abort("slot1")  # type: ignore[arg-type]
    moves = [(e["old"], e["new"], e["trigger"]) for e in events
             if e["event"] == "slot_state_changed" and e["slot"] == "slot1"]  # fmt: skip
    assert moves == [("Unclaimed/Idle", "Owner/Idle", "claim_aborted"),
                     ("Owner/Idle", "Unclaimed/Idle", "is_owner_false")]
    assert member.offers["slot1"] != used
    assert member.state_changed.is_set()  # its ad goes out now
    assert states(member.daemon) == {"slot1": "Unclaimed/Idle", dslot: "Claimed/Idle",
                                     "slot2": "Unclaimed/Idle"}


def test_an_aborted_request_on_an_owner_pslot_leaves_it_owner_with_a_new_offer(
        tmp_path: Path) -> None:  # fmt: skip
    """IS_OWNER true: condor_startd's abort_claim moves the p-slot to Owner and it stays
    there; the schedd's offer is replaced all the same."""

    used = ClaimIdFactory("<127.0.0.1:9618>", 1).new()

    async def scenario() -> tuple[Member, list[Any]]:
        built = Member(daemon_without_cgroups(tmp_path, CONFIG))
        engine = built.daemon.engine  # the owner came back since the last pass
        engine.config = dataclasses.replace(
            engine.config, expressions={**engine.config.expressions,
                                        "IS_OWNER": classads.parse_expr("True")},
            constants={**engine.config.constants, "IS_OWNER": True})
        built.offers["slot1"] = used
        with capture_logs() as events:
            PslotPreemption(built).abort("slot1")  # type: ignore[arg-type]
        return built, events

    built, events = asyncio.run(scenario())
    try:
        moves = [(e["old"], e["new"], e["trigger"]) for e in events
                 if e["event"] == "slot_state_changed" and e["slot"] == "slot1"]  # fmt: skip
        assert moves == [("Unclaimed/Idle", "Owner/Idle", "claim_aborted")]
        assert states(built.daemon)["slot1"] == "Owner/Idle"
        assert built.offers["slot1"] != used
        assert built.state_changed.is_set()
    finally:
        built.daemon.jobs.store.close()


def test_an_aborted_request_ends_a_matched_slots_match(tmp_path: Path) -> None:
    """A Matched static slot aborted goes Owner -> Unclaimed and its match is over: the
    next claim is granted (before, its match deadline was left behind and that claim was
    refused once with "START became false while Matched")."""

    async def scenario() -> dict[str, Any]:
        built = Member(daemon_without_cgroups(tmp_path, "SLOT_TYPE_1_PARTITIONABLE = False\n"))
        jobs = built.daemon.jobs
        try:
            jobs.matches.match("slot1")
            assert states(built.daemon)["slot1"] == "Matched/Idle"
            PslotPreemption(built).abort("slot1")  # type: ignore[arg-type]
            assert states(built.daemon)["slot1"] == "Unclaimed/Idle"
            return jobs.request_claim("slot1", dict(JOB))
        finally:
            jobs.store.close()

    assert asyncio.run(scenario())["slot"] == "slot1"


def test_a_request_waiting_behind_an_aborted_one_finds_its_claim_id_revoked(
        member: Member) -> None:  # fmt: skip
    """Two REQUEST_CLAIMs with the p-slot's offer: the first is refused and aborts
    (a new offer); the second, waiting for its turn, then holds an unknown claim id and
    is refused (NOT_OK, as condor_startd answers one), not carved with the revoked one."""
    used = member.offers["slot1"] = member.ids.new()
    turns: list[tuple[str, bool]] = []

    async def scenario() -> None:
        preemption = PslotPreemption(member)  # type: ignore[arg-type]

        async def request(name: str) -> None:
            async with preemption.turn("slot1", used.full()) as offered:
                turns.append((name, offered))
                if name == "first":
                    await asyncio.sleep(0)  # the second now waits for its turn
                    preemption.abort("slot1")

        await asyncio.gather(request("first"), request("second"))

    asyncio.run(scenario())
    assert turns == [("first", True), ("second", False)]
    assert member.offers["slot1"] != used


def test_a_job_killed_before_its_starter_exists_still_gets_its_vacate_reason(
        member: Member) -> None:  # fmt: skip
    """A pool job whose starter waits for its input transfer (no starter yet) is killed by
    a p-slot's preemption: its shadow is still told "Preempted for a Priority user" (1019),
    not "Unspecified job interruption" (1005, no reason given)."""
    daemon = member.daemon
    dslot, claim_id = member.claim("slot1")
    claim = daemon.jobs.lookup(claim_id)[1]
    # as JobManager.activate registers a pool job (it refuses without a cgroup tree)
    job = Job("pool.1#1.0", dslot, claim, dict(JOB))
    daemon.jobs.running[dslot], daemon.jobs.jobs[job.job_id] = job, job
    started, actions = daemon.engine.activate(dslot, dict(JOB), now())
    assert started
    daemon.execute([a for a in actions if not isinstance(a, act.SpawnStarter)])
    assert job.handle is None
    daemon.execute(kill_claim(daemon.engine, dslot, now(), "pslot_preemption"))
    assert states(daemon)[dslot].startswith("Preempting/")
    assert job.evicted
    assert job.vacate_reason == ("Preempted for a Priority user", 1019, 0)


def test_the_named_dslots_claims_are_killed_and_the_carve_waits_until_they_are_gone(
        member: Member) -> None:  # fmt: skip
    first, first_claim = member.claim("slot1")
    second, _ = member.claim("slot1")
    kept, _ = member.claim("slot2")
    daemon = member.daemon
    assert daemon.ads()[0]["Cpus"] == 0  # slot1 is full

    async def scenario() -> tuple[bool, list[Any]]:
        daemon.pool = member  # type: ignore[assignment]  # its d-slot deletions wake the wait
        with capture_logs() as events:
            task = asyncio.create_task(PslotPreemption(member).take_back(  # type: ignore[arg-type]
                "slot1", [first_claim, member.offers[second].full(), first_claim], SCHEDD))
            await asyncio.sleep(0)
            assert not task.done()  # waiting for the d-slots to go
            assert states(daemon)[first] == states(daemon)[second] == "Owner/Idle"
            for _ in range(2):  # Owner -> Unclaimed -> deleted, a pass at a time
                daemon.evaluate()
            taken = await task
        return taken, events

    taken, events = asyncio.run(scenario())
    assert taken
    names = [e for e in events if e["event"] == "pslot_preempting"]
    assert names[0]["dslots"] == [first, second]  # each once
    assert [e["reason"] for e in events if e["event"] == "claim_holder_notified"] \
        == ["pslot_preemption", "pslot_preemption"]  # fmt: skip
    assert [e for e in events if e["event"] == "pslot_preempted"]
    assert first not in daemon.engine.slots and second not in daemon.engine.slots
    assert states(daemon)[kept] == "Claimed/Idle"
    slot1 = next(ad for ad in daemon.ads() if str(ad["Name"]).startswith("slot1@"))
    assert slot1["Cpus"] == 2  # both CPUs back for the new d-slot
    assert first_claim not in daemon.jobs.claims
