"""A preempting (higher-RANK) claim on a running job, with and without retirement time.

condor_startd 25 (ResState::eval_policy) retires the running job only while retirement
is left: with MaxJobRetirementTime 0 (or no more left than the vacate time) the slot goes
from Claimed/Busy straight to Preempting/Vacating (p1; 17 from Suspended); otherwise
Claimed/Busy -> Claimed/Retiring (13) until the retirement runs out (18) or the job ends.
PREEMPT, condor_vacate and a quick drain keep their zero-length Retiring (13, 18), as
condor_startd's retire_claim; its kill_claim (lease expired, release, fast vacate, drain or
shutdown) goes from Busy straight to Preempting/Killing (p1).
"""

from __future__ import annotations

from execd.policy import actions as act
from tests.unit.policy_helpers import Driver

RANK = 'TARGET.Owner == "boss"'


def _moves(d: Driver) -> list[tuple[str, str]]:
    return [(str(a.fields["new"]), str(a.fields["transition"])) for a in d.actions
            if isinstance(a, act.LogEvent) and a.event == "slot_state_changed"]


def _boss_claims(d: Driver) -> bool:
    return bool(d.do(d.engine.request_claim("slot1", d.ids.new(), {"Owner": "boss"},
                                            d.clock.now())))


def _running(expressions: dict[str, str], run_for: float = 5.0) -> tuple[Driver, int]:
    d = Driver({"RANK": RANK, **expressions})
    d.busy({"Owner": "alice"})
    d.tick(run_for)
    assert d.pair == "Claimed/Busy"
    return d, len(_moves(d))


def test_zero_retirement_goes_from_busy_straight_to_preempting() -> None:
    d, before = _running({"MAXJOBRETIREMENTTIME": "0"})
    assert _boss_claims(d)
    assert _moves(d)[before:] == [("Preempting/Vacating", "p1")]
    assert act.SoftKill("slot1") in d.actions
    d.starter_exited()  # the evicted job is gone: the preempting claim takes the slot
    assert _moves(d)[before + 1:] == [("Claimed/Idle", "23")]
    assert d.slot.claim.request_ad["Owner"] == "boss"


def test_zero_retirement_with_want_vacate_false_kills_from_busy() -> None:
    d, before = _running({"MAXJOBRETIREMENTTIME": "0", "WANT_VACATE": "False"})
    assert _boss_claims(d)
    assert _moves(d)[before:] == [("Preempting/Killing", "p1")]
    assert act.HardKill("slot1") in d.actions and act.SoftKill("slot1") not in d.actions


def test_retirement_no_longer_than_the_vacate_time_is_over_already() -> None:
    # 30 s of retirement, 25 s run: 5 s left, under the vacate time of 10 s
    d, before = _running({"MAXJOBRETIREMENTTIME": "30", "MachineMaxVacateTime": "10"}, 25)
    assert _boss_claims(d)
    assert _moves(d)[before:] == [("Preempting/Vacating", "p1")]


def test_the_job_lowering_its_retirement_to_zero_is_preempted_from_busy() -> None:
    d = Driver({"RANK": RANK, "MAXJOBRETIREMENTTIME": "3600"})
    d.busy({"Owner": "alice", "MaxJobRetirementTime": 0})
    assert _boss_claims(d)
    assert _moves(d)[-1] == ("Preempting/Vacating", "p1")


def test_retirement_left_retires_then_preempts_when_it_runs_out() -> None:
    d, before = _running({"MAXJOBRETIREMENTTIME": "30", "MachineMaxVacateTime": "10"})
    assert _boss_claims(d)
    assert _moves(d)[before:] == [("Claimed/Retiring", "13")]
    assert not d.of_type(act.SoftKill)  # the job keeps running
    d.tick(14)  # 19 s run: 11 s left, more than the vacate time
    assert d.pair == "Claimed/Retiring"
    d.tick(1)  # 20 s run: the 10 s left are the vacate time
    assert _moves(d)[before:] == [("Claimed/Retiring", "13"), ("Preempting/Vacating", "18")]
    assert d.slot.vacate_deadline == d.clock.mono + 10
    d.starter_exited()
    assert d.pair == "Claimed/Idle" and d.slot.claim.request_ad["Owner"] == "boss"


def test_retirement_left_and_the_job_ends_within_it() -> None:
    d, before = _running({"MAXJOBRETIREMENTTIME": "30", "MachineMaxVacateTime": "10"})
    assert _boss_claims(d)
    d.tick(3)
    d.do(d.engine.job_exited("slot1", d.clock.now()))
    d.starter_exited()
    # condor_startd: the starter's exit with a preempting claim leaves Cleaning for
    # Preempting at once (no Claimed/Idle of the old claim in between)
    assert _moves(d)[before:] == [
        ("Claimed/Retiring", "13"), ("Claimed/Cleaning", "18"), ("Preempting/Vacating", "c2"),
        ("Claimed/Idle", "23")]
    assert not d.of_type(act.SoftKill) and not d.of_type(act.HardKill)
    assert d.slot.claim.request_ad["Owner"] == "boss"


def test_a_suspended_job_with_no_retirement_left_is_preempted_17() -> None:
    d, before = _running({"MAXJOBRETIREMENTTIME": "0", "WANT_SUSPEND": "True",
                          "SUSPEND": "Suspend =?= True", "CONTINUE": "False"})
    d.set_facts(Suspend=True)
    d.tick(1)
    assert d.pair == "Claimed/Suspended"
    assert _boss_claims(d)
    assert _moves(d)[before:] == [("Claimed/Suspended", "14"), ("Preempting/Vacating", "17")]
    assert act.Continue("slot1") in d.actions  # resumed to take its soft kill


def test_a_suspended_job_with_retirement_left_retires_when_it_continues() -> None:
    d, before = _running({"MAXJOBRETIREMENTTIME": "3600", "WANT_SUSPEND": "True",
                          "SUSPEND": "Suspend =?= True", "CONTINUE": "Suspend =!= True"})
    d.set_facts(Suspend=True)
    d.tick(1)
    assert _boss_claims(d)
    assert d.pair == "Claimed/Suspended" and not d.of_type(act.Continue)
    d.set_facts(Suspend=False)
    d.tick(1)
    assert _moves(d)[before:] == [("Claimed/Suspended", "14"), ("Claimed/Retiring", "16")]


def test_preempt_keeps_its_zero_length_retiring() -> None:
    d, before = _running({"MAXJOBRETIREMENTTIME": "0", "PREEMPT": "Preempt =?= True"})
    d.set_facts(Preempt=True)
    d.tick(1)
    assert _moves(d)[before:] == [("Claimed/Retiring", "13"), ("Preempting/Vacating", "18")]


def test_condor_vacate_keeps_its_zero_length_retiring() -> None:
    d, before = _running({"MAXJOBRETIREMENTTIME": "0"})
    d.do(d.engine.vacate("slot1", d.clock.now()))
    assert _moves(d)[before:] == [("Claimed/Retiring", "13"), ("Preempting/Vacating", "18")]


# ---- condor_startd's kill_claim: Busy straight to Preempting/Killing; retire_claim
# (condor_vacate, a quick drain) through a zero-length Retiring --------------------------
def test_killing_paths_go_from_busy_straight_to_killing() -> None:
    def fresh() -> tuple[Driver, int]:
        return _running({"MAXJOBRETIREMENTTIME": "3600"})

    d, before = fresh()
    d.do(d.engine.vacate("slot1", d.clock.now(), fast=True))
    assert _moves(d)[before:] == [("Preempting/Killing", "p1")]
    d, before = fresh()
    d.do(d.engine.release("slot1", d.clock.now(), d.slot.claim.id))
    assert _moves(d)[before:] == [("Preempting/Killing", "p1")]
    d, before = fresh()
    d.do(d.engine.drain("fast", d.clock.now()))
    assert _moves(d)[before:] == [("Preempting/Killing", "p1")]
    d, before = fresh()
    d.do(d.engine.shutdown("fast", d.clock.now()))
    assert _moves(d)[before:] == [("Preempting/Killing", "p1")]
    assert act.HardKill("slot1") in d.actions and act.SoftKill("slot1") not in d.actions


def test_an_expired_lease_kills_from_busy() -> None:
    d = Driver({"MAXJOBRETIREMENTTIME": "3600"},
               numbers={"ALIVE_INTERVAL": 10, "MAX_CLAIM_ALIVES_MISSED": 3})
    d.busy()
    before = len(_moves(d))
    d.tick(31)  # no alive for three intervals
    assert _moves(d)[before:] == [("Preempting/Killing", "p1")]


def test_a_quick_drain_keeps_its_zero_length_retiring() -> None:
    d, before = _running({"MAXJOBRETIREMENTTIME": "3600"})
    d.do(d.engine.drain("quick", d.clock.now()))
    assert _moves(d)[before:before + 2] == [("Claimed/Retiring", "13"),
                                            ("Preempting/Vacating", "18")]


def test_a_graceful_vacate_retires_the_job_for_good_then_vacates_it() -> None:
    """condor_startd's vacate_all: retire_claim, irreversible. The job keeps what is left
    of its retirement (evicted once no more than the vacate time is left), and a
    preempting claim that comes and goes meanwhile does not unretire it."""
    d, before = _running({"MAXJOBRETIREMENTTIME": "100", "MachineMaxVacateTime": "10"})
    d.do(d.engine.vacate("slot1", d.clock.now(), fast=False))
    assert _moves(d)[before:] == [("Claimed/Retiring", "13")]
    assert act.SoftKill("slot1") not in d.actions
    d.tick(50)
    assert d.pair == "Claimed/Retiring"
    assert d.engine.attributes("slot1", d.clock.now())["RetirementTimeRemaining"] == 45
    d.tick(40)  # 5 + 50 + 40: 5 s left, less than the vacate time
    assert _moves(d)[before + 1:] == [("Preempting/Vacating", "18")]
    assert act.SoftKill("slot1") in d.actions

