"""A waiting preempting claim takes the slot only if START lets it, as condor_startd 25.

condor_startd (src/condor_startd.V6/Resource.cpp, Resource::leave_preempting_state)
evaluates START against the waiting claim's job once the current claim is gone (after
the retirement and the vacate): START defined and false refuses it ("preempting claim
refused - START is false"): its REQUEST_CLAIM is answered NOT_OK and the slot goes to
Owner (22/25); true or undefined hands it the slot (23/24). A drain keeps the waiting
claim (ResMgr::startDraining touches no r_pre): the drain's START, False unless the
drain gave one, refuses it at the end of the retirement. Nothing of the startd's own
bounds the wait (no timer: the schedd gives up, REQUEST_CLAIM_TIMEOUT, by closing the
request's connection, which the daemon turns into a withdrawal).
"""

from __future__ import annotations

from typing import Any

from execd.policy import actions as act
from tests.unit.policy_helpers import FACTS, Driver

# alice may always run; bob only while the machine welcomes him (MY.Welcome)
START = 'TARGET.Owner == "alice" || MY.Welcome == TARGET.Owner'
RETIRING = {"START": START, "RANK": 'TARGET.Owner == "bob"', "MAXJOBRETIREMENTTIME": "3600"}


def _events(d: Driver, name: str) -> list[act.LogEvent]:
    return [a for a in d.actions if isinstance(a, act.LogEvent) and a.event == name]


def _moves(d: Driver) -> list[tuple[str, str]]:
    return [(str(e.fields["new"]), str(e.fields["transition"]))
            for e in _events(d, "slot_state_changed")]  # fmt: skip


def _bob_preempts(d: Driver) -> Any:
    """alice's job runs; bob's claim (a higher RANK) waits while it retires."""
    d.busy({"Owner": "alice"})
    assert d.do(d.engine.request_claim("slot1", d.ids.new(), {"Owner": "bob"},
                                       d.clock.now(), user_priority=True))  # fmt: skip
    assert d.pair == "Claimed/Retiring"
    assert d.slot.preempting_claim is not None
    return d.slot.preempting_claim


def _alice_ends(d: Driver) -> None:
    """alice's job ends within its retirement; its starter exits."""
    d.do(d.engine.job_exited("slot1", d.clock.now()))
    d.starter_exited()
    d.tick()


def test_start_false_at_the_takeover_refuses_the_waiting_claim() -> None:
    d = Driver(RETIRING, facts={**FACTS, "Welcome": "bob"})
    bob = _bob_preempts(d)
    d.set_facts(Welcome="carol")  # the machine no longer lets bob's job start
    d.tick(60)
    assert d.pair == "Claimed/Retiring"  # it waits on; START matters at the takeover
    before = len(_moves(d))
    _alice_ends(d)
    assert _moves(d)[before:] == [("Claimed/Cleaning", "18"), ("Preempting/Vacating", "c2"),
                                  ("Owner/Idle", "22"), ("Unclaimed/Idle", "1")]
    assert act.NotifyClaimHolder("slot1", str(bob.id), "START is false") in d.actions
    (dropped,) = _events(d, "preempting_claim_withdrawn")
    assert dropped.fields == {"slot": "slot1", "why": "START is false"}
    assert d.slot.claim is None and d.slot.preempting_claim is None
    assert not d.of_type(act.ClaimTookSlot)


def test_start_undefined_at_the_takeover_lets_the_claim_take_the_slot() -> None:
    d = Driver(RETIRING, facts={**FACTS, "Welcome": "bob"})
    bob = _bob_preempts(d)
    d.engine.set_facts("slot1", FACTS)  # MY.Welcome undefined: START is undefined for bob
    _alice_ends(d)
    assert _moves(d)[-1] == ("Claimed/Idle", "23")
    assert d.slot.claim is bob
    assert act.ClaimTookSlot("slot1", str(bob.id)) in d.actions
    assert not _events(d, "preempting_claim_withdrawn")


def test_start_true_at_the_takeover_lets_the_claim_take_the_slot() -> None:
    d = Driver(RETIRING, facts={**FACTS, "Welcome": "bob"})
    bob = _bob_preempts(d)
    _alice_ends(d)
    assert _moves(d)[-1] == ("Claimed/Idle", "23") and d.slot.claim is bob


def test_a_graceful_drain_keeps_the_waiting_claim_until_the_retirement_ends() -> None:
    d = Driver(RETIRING, facts={**FACTS, "Welcome": "bob"})
    bob = _bob_preempts(d)
    d.do(d.engine.drain("graceful", d.clock.now(), reason="test"))
    assert d.pair == "Claimed/Retiring"
    assert d.slot.preempting_claim is bob  # still waiting, its holder not yet answered
    assert not [a for a in d.of_type(act.NotifyClaimHolder) if a.claim == str(bob.id)]
    d.tick(600)
    assert d.slot.preempting_claim is bob
    before = len(_moves(d))
    _alice_ends(d)
    # the drain's START (False) refuses it; the slot drains (through Unclaimed: IS_OWNER
    # is false, as condor_startd's enter_action finds on entering Owner)
    assert act.NotifyClaimHolder("slot1", str(bob.id), "START is false") in d.actions
    assert _moves(d)[before:] == [("Claimed/Cleaning", "18"), ("Preempting/Vacating", "c2"),
                                  ("Owner/Idle", "22"), ("Unclaimed/Idle", "1"),
                                  ("Drained/Retiring", "37"), ("Drained/Idle", "33")]
    assert d.slot.claim is None and d.slot.preempting_claim is None


def test_a_quick_drain_refuses_the_waiting_claim_once_the_job_is_vacated() -> None:
    d = Driver(RETIRING, facts={**FACTS, "Welcome": "bob"})
    bob = _bob_preempts(d)
    d.do(d.engine.drain("quick", d.clock.now(), reason="test"))
    assert d.pair == "Preempting/Vacating" and d.slot.preempting_claim is bob
    d.starter_exited()
    assert act.NotifyClaimHolder("slot1", str(bob.id), "START is false") in d.actions
    assert d.slot.claim is None and d.slot.preempting_claim is None
    assert d.pair.startswith("Drained/")


def test_a_drain_start_expression_that_admits_the_job_lets_it_take_the_slot() -> None:
    d = Driver(RETIRING, facts={**FACTS, "Welcome": "bob"})
    bob = _bob_preempts(d)
    d.do(d.engine.drain("graceful", d.clock.now(), reason="test",
                        start='TARGET.Owner == "bob"'))  # fmt: skip
    _alice_ends(d)
    assert d.slot.claim is bob and d.pair == "Claimed/Idle"


def test_a_waiting_claim_waits_out_the_whole_retirement_with_no_bound_of_its_own() -> None:
    """No timer of the startd's ends the wait (the daemon once gave up after 30 minutes):
    two hours into a three-hour retirement bob's claim still waits; the retirement's end
    (MaxJobRetirementTime) vacates the job and hands bob the slot."""
    d = Driver({**RETIRING, "MAXJOBRETIREMENTTIME": "10800"}, facts={**FACTS, "Welcome": "bob"})
    bob = _bob_preempts(d)
    d.tick_with_alives(7200)  # only the running job's schedd sends alives
    assert d.pair == "Claimed/Retiring" and d.slot.preempting_claim is bob
    assert not _events(d, "preempting_claim_withdrawn")
    d.tick_with_alives(3600 + 60)
    assert d.pair == "Preempting/Vacating"
    d.starter_exited()
    assert d.slot.claim is bob and d.pair == "Claimed/Idle"
