"""A negotiator's preempting claim of an equal RANK: preemption for user priority.

condor_startd 25 (command.cpp request_claim) accepts the REQUEST_CLAIM that carries a
claimed slot's preempting claim id when the new claim's RANK is no lower than the
current claim's: a higher one preempts "based on machine rank", an equal one "based on
user priority" (the negotiator matched a submitter with a better priority, under
PREEMPTION_REQUIREMENTS); a lower one is refused and the claim stays. Both take the
same path afterwards: no retirement left -> Preempting (p1, 10), retirement left ->
Claimed/Retiring (13), undone (19) if the preempting claim goes away. Fetched work and
execd's control socket have no user priority: they must rank the job higher.
"""

from __future__ import annotations

from typing import Any

from execd.policy import actions as act
from tests.unit.policy_helpers import Driver


def _events(d: Driver, name: str) -> list[act.LogEvent]:
    return [a for a in d.actions if isinstance(a, act.LogEvent) and a.event == name]


def _moves(d: Driver) -> list[tuple[str, str]]:
    return [(str(e.fields["new"]), str(e.fields["transition"]))
            for e in _events(d, "slot_state_changed")]  # fmt: skip


def _bob_claims(d: Driver, *, user_priority: bool = True, job: dict[str, Any] | None = None
                ) -> bool:  # fmt: skip
    return bool(d.do(d.engine.request_claim("slot1", d.ids.new(), job or {"Owner": "bob"},
                                            d.clock.now(), user_priority=user_priority)))


def _alice_running(expressions: dict[str, str] | None = None) -> tuple[Driver, int]:
    d = Driver(expressions)
    d.busy({"Owner": "alice"})
    d.tick(5)
    assert d.pair == "Claimed/Busy"
    return d, len(_moves(d))


def test_an_equal_rank_preempts_for_user_priority_through_preempting() -> None:
    d, before = _alice_running()
    alice = d.slot.claim
    assert _bob_claims(d)
    (preempting,) = _events(d, "preempting_claim")
    assert preempting.fields == {"slot": "slot1", "basis": "user_priority",
                                 "why": "preempting claim based on user priority"}
    # no retirement time: Busy straight to Preempting, the job gets its soft kill
    assert _moves(d)[before:] == [("Preempting/Vacating", "p1")]
    assert act.SoftKill("slot1") in d.actions
    d.starter_exited()
    # the evicted claim's holder is told why; the new claim holds the slot (23)
    assert act.NotifyClaimHolder("slot1", str(alice.id), "user_priority") in d.actions
    assert _moves(d)[before + 1:] == [("Claimed/Idle", "23")]
    assert d.slot.claim.request_ad["Owner"] == "bob"
    assert d.slot.claim.preempts_for == "user_priority"
    assert d.activate({"Owner": "bob"}) and d.pair == "Claimed/Busy"


def test_a_higher_rank_from_the_negotiator_still_preempts_for_rank() -> None:
    d, _ = _alice_running({"RANK": 'TARGET.Owner == "bob"'})
    assert _bob_claims(d)
    assert _events(d, "preempting_claim")[0].fields["basis"] == "rank"
    assert "machine rank" in str(_events(d, "preempting_claim")[0].fields["why"])
    assert d.pair == "Preempting/Vacating"


def test_a_lower_rank_is_refused_and_the_claim_stays() -> None:
    d, before = _alice_running({"RANK": 'TARGET.Owner == "alice"'})
    alice = d.slot.claim
    assert not _bob_claims(d)
    (refused,) = _events(d, "claim_refused")
    assert refused.fields["why"] == ("slot is Claimed (a preempting claim needs a RANK "
                                     "no lower than the claim's 1, not 0)")
    assert d.pair == "Claimed/Busy" and d.slot.claim is alice
    assert d.slot.preempting_claim is None and not _events(d, "preempting_claim")
    assert _moves(d)[before:] == [] and not d.of_type(act.SoftKill)


def test_without_the_negotiator_an_equal_rank_is_refused() -> None:
    """Fetched work and the control socket: no user priority, a higher RANK needed."""
    d, before = _alice_running()
    assert not _bob_claims(d, user_priority=False)
    assert "needs a RANK higher than the claim's 0, not 0" in str(
        _events(d, "claim_refused")[0].fields["why"])
    assert d.pair == "Claimed/Busy" and _moves(d)[before:] == []


def test_retirement_left_retires_then_unretires_when_the_claim_goes_away() -> None:
    d, before = _alice_running({"MAXJOBRETIREMENTTIME": "3600"})
    assert _bob_claims(d)
    assert _moves(d)[before:] == [("Claimed/Retiring", "13")]
    assert not d.of_type(act.SoftKill)  # the job keeps its retirement time
    d.do(d.engine.withdraw_preempting_claim("slot1", d.clock.now()))
    assert _moves(d)[before:] == [("Claimed/Retiring", "13"), ("Claimed/Busy", "19")]
    assert d.slot.claim.request_ad["Owner"] == "alice"


def test_a_job_ending_in_retirement_hands_the_slot_over() -> None:
    d, before = _alice_running({"MAXJOBRETIREMENTTIME": "3600"})
    alice = d.slot.claim
    assert _bob_claims(d)
    d.starter_exited()  # the job ended on its own within its retirement
    assert _moves(d)[before:] == [("Claimed/Retiring", "13"), ("Claimed/Cleaning", "18"),
                                  ("Preempting/Vacating", "c2"), ("Claimed/Idle", "23")]
    assert act.NotifyClaimHolder("slot1", str(alice.id), "user_priority") in d.actions
    assert d.slot.claim.request_ad["Owner"] == "bob"


def test_an_idle_claim_is_preempted_at_once() -> None:
    d = Driver()
    assert d.claim({"Owner": "alice"}) and d.pair == "Claimed/Idle"
    before = len(_moves(d))
    assert _bob_claims(d)
    # no starter: the Preempting state's work is done at once (10, then 23)
    assert _moves(d)[before:] == [("Preempting/Vacating", "10"), ("Claimed/Idle", "23")]
    assert d.slot.claim.request_ad["Owner"] == "bob"


def test_a_new_preempting_claim_replaces_a_waiting_one_of_no_higher_rank() -> None:
    """condor_startd's preempting preempting claim: while the job retires, the negotiator
    may match the slot again; the new claim takes the waiting one's place, whose holder
    is told (its REQUEST_CLAIM is answered NOT_OK); the retirement goes on."""
    d, before = _alice_running({"MAXJOBRETIREMENTTIME": "3600"})
    assert _bob_claims(d)
    bob = d.slot.preempting_claim
    assert _bob_claims(d, job={"Owner": "carol"})
    carol = d.slot.preempting_claim
    assert carol is not bob and carol.request_ad["Owner"] == "carol"
    assert act.NotifyClaimHolder("slot1", str(bob.id), "replaced") in d.actions
    assert _events(d, "preempting_claim_withdrawn")[0].fields["why"] == \
        "replaced by a new preempting claim"
    assert [e.fields["basis"] for e in _events(d, "preempting_claim")] == \
        ["user_priority", "user_priority"]
    assert _moves(d)[before:] == [("Claimed/Retiring", "13")]
    d.starter_exited()
    assert d.slot.claim is carol and d.pair == "Claimed/Idle"


def test_a_waiting_preempting_claim_of_a_higher_rank_is_not_replaced() -> None:
    d, _ = _alice_running({"MAXJOBRETIREMENTTIME": "3600", "RANK": 'TARGET.Owner == "bob"'})
    assert _bob_claims(d)  # RANK 1: for rank
    waiting = d.slot.preempting_claim
    assert not _bob_claims(d, job={"Owner": "carol"})  # RANK 0, as the running job's
    assert _events(d, "claim_refused")[0].fields["why"] == \
        "slot is Claimed (a preempting claim of RANK 1 waits)"
    assert not _bob_claims(d, job={"Owner": "bob"}, user_priority=False)  # not the negotiator's
    assert d.slot.preempting_claim is waiting and d.pair == "Claimed/Retiring"
    assert not d.of_type(act.NotifyClaimHolder)
