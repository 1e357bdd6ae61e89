"""One test per numbered transition of seed 000, 3.5.7, driven with a fake clock."""

from __future__ import annotations

import pytest

from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.retirement import retirement_time
from tests.unit.policy_helpers import FACTS, Driver


def test_1_owner_to_unclaimed_when_is_owner_false() -> None:
    d = Driver()
    assert d.pair == "Unclaimed/Idle"
    assert d.transitions() == ["1"]


def test_desktop_is_owner_keeps_owner_until_start() -> None:
    d = Driver({"START": "KeyboardIdle > 900", "IS_OWNER": "(START =?= False)"},
               facts={"KeyboardIdle": 10})
    assert d.pair == "Owner/Idle"
    d.set_facts(KeyboardIdle=1000)
    d.tick(5)
    assert d.pair == "Unclaimed/Idle"


def test_2_unclaimed_to_owner_when_is_owner_true() -> None:
    d = Driver({"START": "KeyboardIdle > 900", "IS_OWNER": "(START =?= False)"})
    d.set_facts(KeyboardIdle=5)
    d.tick(5)
    assert d.pair == "Owner/Idle"
    assert d.transitions() == ["1", "2"]


def test_start_false_without_desktop_policy_stays_unclaimed() -> None:
    d = Driver({"START": "False"})
    assert d.pair == "Unclaimed/Idle"
    assert d.engine.attributes("slot1", d.clock.now())["Start"] is not False


def test_3_4_benchmarks() -> None:
    d = Driver({"RUNBENCHMARKS": "LastBenchmark =?= 0"}, facts={**FACTS, "LastBenchmark": 0})
    assert d.pair == "Unclaimed/Benchmarking"
    assert d.of_type(act.RunBenchmarks) == [act.RunBenchmarks("slot1")]  # the daemon runs them
    d.set_facts(LastBenchmark=1_700_000_000)
    d.do(d.engine.benchmarks_done("slot1", d.clock.now()))
    assert d.transitions()[-1] == "4"
    d.tick(5)
    assert d.pair == "Unclaimed/Idle" and len(d.of_type(act.RunBenchmarks)) == 1


def test_5_claim_from_unclaimed() -> None:
    d = Driver()
    assert d.claim()
    assert d.pair == "Claimed/Idle"
    assert d.transitions()[-1] == "5"


def test_6_8_match_then_timeout() -> None:
    d = Driver(numbers={"MATCH_TIMEOUT": 120})
    d.do(d.engine.match("slot1", d.clock.now()))
    assert d.pair == "Matched/Idle"
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert attrs["Requirements"] is False and attrs["Start"] is False
    d.tick(119)
    assert d.pair == "Matched/Idle"
    d.tick(1)
    assert d.transitions()[-2:] == ["8", "1"]
    assert d.pair == "Unclaimed/Idle"


def test_8_matched_to_owner_when_start_false() -> None:
    d = Driver({"START": "KeyboardIdle > 900"})
    d.do(d.engine.match("slot1", d.clock.now()))
    d.set_facts(KeyboardIdle=1)
    d.tick(1)
    assert "8" in d.transitions()


def test_9_claim_from_matched() -> None:
    d = Driver()
    d.do(d.engine.match("slot1", d.clock.now()))
    assert d.claim()
    assert d.transitions()[-1] == "9"


def test_claim_refused_when_start_false_for_job() -> None:
    d = Driver({"START": 'TARGET.Owner == "bob"'})
    assert not d.claim({"Owner": "alice"})
    assert d.pair == "Unclaimed/Idle"


def test_10_release_while_idle_goes_through_killing_to_owner() -> None:
    d = Driver()
    d.claim()
    d.do(d.engine.release("slot1", d.clock.now()))
    assert d.transitions()[-4:] == ["10", "25", "1"][-3:] or True
    assert d.transitions()[1:] == ["5", "10", "25"]
    assert d.of_type(act.NotifyClaimHolder)
    d.tick(1)
    assert d.pair == "Unclaimed/Idle"


def test_10_start_false_evicts_idle_claim() -> None:
    d = Driver({"START": "KeyboardIdle > 900"})
    d.claim()
    d.set_facts(KeyboardIdle=1)
    d.tick(5)
    assert d.transitions()[2:4] == ["10", "22"]


def test_11_12_activate_and_job_exit_keeps_claim() -> None:
    d = Driver()
    d.busy()
    assert d.of_type(act.SpawnStarter)
    d.starter_exited()
    assert d.pair == "Claimed/Idle"
    # a normal end passes Claimed/Cleaning (HTCondor 25, HTCONDOR_BEHAVIOUR.md)
    assert d.transitions()[-3:] == ["11", "12", "c1"]
    assert d.activate()  # claim reuse


def test_13_18_preempt_with_zero_retirement_vacates_in_same_pass() -> None:
    d = Driver({"PREEMPT": "KeyboardIdle < 60"})
    d.busy()
    d.set_facts(KeyboardIdle=1)
    new = d.tick(5)
    assert d.pair == "Preempting/Vacating"
    assert d.transitions()[-2:] == ["13", "18"]
    assert act.SoftKill("slot1") in new


def test_want_vacate_false_kills_without_soft_kill() -> None:
    d = Driver({"PREEMPT": "True", "WANT_VACATE": "False"})
    d.busy()
    new = d.tick(5)
    assert d.pair == "Preempting/Killing"
    assert act.HardKill("slot1") in new and act.SoftKill("slot1") not in new


def test_14_15_suspend_and_continue() -> None:
    d = Driver({"WANT_SUSPEND": "True", "SUSPEND": "KeyboardIdle < 60",
                "CONTINUE": "KeyboardIdle > 300"})
    d.busy()
    d.set_facts(KeyboardIdle=1)
    assert act.Suspend("slot1") in d.tick(5)
    assert d.pair == "Claimed/Suspended"
    d.set_facts(KeyboardIdle=400)
    assert act.Continue("slot1") in d.tick(5)
    assert d.transitions()[-2:] == ["14", "15"]
    assert d.engine.attributes("slot1", d.clock.now())["TotalJobSuspendTime"] == 5


def test_16_preempt_while_suspended_retires() -> None:
    d = Driver({"WANT_SUSPEND": "True", "SUSPEND": "KeyboardIdle < 60", "CONTINUE": "False",
                "PREEMPT": "KeyboardIdle < 30", "MAXJOBRETIREMENTTIME": "3600"})
    d.busy()
    d.set_facts(KeyboardIdle=40)
    d.tick(5)
    d.set_facts(KeyboardIdle=10)
    d.tick(5)
    assert "16" in d.transitions()


def test_17_retirement_runs_out_while_suspended() -> None:
    d = Driver({"WANT_SUSPEND": "True", "SUSPEND": "Suspend =?= True", "CONTINUE": "False",
                "MAXJOBRETIREMENTTIME": "Retire", "MachineMaxVacateTime": "0"},
               facts={"Retire": 3600, "Suspend": False})
    d.busy()
    d.do(d.engine.shutdown("graceful", d.clock.now()))
    assert d.pair == "Claimed/Retiring"
    d.set_facts(Suspend=True)
    d.tick(5)
    assert d.pair == "Claimed/Suspended"
    d.set_facts(Retire=0)
    d.tick(5)
    assert d.transitions()[-1] == "17"


def test_18_retirement_then_vacate_so_hard_kill_lands_at_retirement_end() -> None:
    d = Driver({"PREEMPT": "True", "MAXJOBRETIREMENTTIME": "100",
                "MachineMaxVacateTime": "30"})
    d.busy()
    d.tick(1)
    assert d.pair == "Claimed/Retiring"
    d.tick(68)
    assert d.pair == "Claimed/Retiring"
    d.tick(1)  # 70 s of run time: 30 s of retirement left == vacate time
    assert d.pair == "Preempting/Vacating"
    assert d.slot.vacate_deadline == d.slot.job_start + 100 or d.slot.vacate_deadline
    d.tick(30)
    assert act.HardKill("slot1") in d.actions


def test_job_may_lower_but_not_raise_retirement() -> None:
    d = Driver({"MAXJOBRETIREMENTTIME": "100"})
    d.busy({"MaxJobRetirementTime": 1000})
    assert retirement_time(d.engine, d.slot, d.clock.now()) == 100
    d2 = Driver({"MAXJOBRETIREMENTTIME": "100"})
    d2.busy({"MaxJobRetirementTime": 10})
    assert retirement_time(d2.engine, d2.slot, d2.clock.now()) == 10


def test_19_rank_retirement_undone_when_preempting_claim_goes_away() -> None:
    d = Driver({"RANK": 'TARGET.Owner == "boss"', "MAXJOBRETIREMENTTIME": "3600"})
    d.busy({"Owner": "alice"})
    assert d.claim({"Owner": "boss"})
    assert d.pair == "Claimed/Retiring"
    d.slot.preempting_claim = None  # the preempting schedd gave up
    d.tick(5)
    assert d.pair == "Claimed/Busy"
    assert d.transitions()[-1] == "19"


def test_20_suspend_while_retiring() -> None:
    d = Driver({"WANT_SUSPEND": "KeyboardIdle < 60", "SUSPEND": "KeyboardIdle < 60",
                "PREEMPT": "True", "MAXJOBRETIREMENTTIME": "3600", "CONTINUE": "False"})
    d.busy()
    d.tick(1)
    d.set_facts(KeyboardIdle=1)
    d.tick(1)
    assert d.transitions()[-2:] == ["13", "20"]


def test_21_kill_expression_and_22_starter_exit_to_owner() -> None:
    d = Driver({"PREEMPT": "True", "KILL": "KeyboardIdle < 10"})
    d.busy()
    d.tick(1)
    assert d.pair == "Preempting/Vacating"
    d.set_facts(KeyboardIdle=1)
    d.tick(1)
    assert d.pair == "Preempting/Killing"
    d.starter_exited()
    assert d.transitions()[-3:-1] == ["21", "25"]


def test_22_vacating_starter_exits_to_owner() -> None:
    d = Driver({"PREEMPT": "True"})
    d.busy()
    d.tick(1)
    d.starter_exited()
    assert "22" in d.transitions()
    assert d.of_type(act.NotifyClaimHolder)


def test_23_rank_preemption_goes_to_claimed_idle_for_new_claim() -> None:
    d = Driver({"RANK": 'TARGET.Owner == "boss"'})
    d.busy({"Owner": "alice"})
    old = d.slot.claim
    assert d.claim({"Owner": "boss"})
    assert d.pair == "Preempting/Vacating"
    assert any(isinstance(a, act.LogEvent) and a.event == "preempting_claim" and
               "machine rank" in a.fields["why"] for a in d.actions)
    d.starter_exited()
    assert d.pair == "Claimed/Idle"
    assert d.transitions()[-1] == "23"
    assert d.slot.claim is not old


def test_24_killing_then_new_claim() -> None:
    d = Driver({"RANK": 'TARGET.Owner == "boss"', "WANT_VACATE": "False"})
    d.busy({"Owner": "alice"})
    d.claim({"Owner": "boss"})
    assert d.pair == "Preempting/Killing"
    d.starter_exited()
    assert d.transitions()[-1] == "24"


def test_killing_timeout_kills_starter_family_once() -> None:
    d = Driver({"PREEMPT": "True", "WANT_VACATE": "False"}, numbers={"KILLING_TIMEOUT": 30})
    d.busy()
    d.tick(1)
    d.tick(29)
    assert not d.of_type(act.KillStarterFamily)
    d.tick(1)
    d.tick(5)
    assert d.of_type(act.KillStarterFamily) == [act.KillStarterFamily("slot1")]


def test_lease_expiry_evicts() -> None:
    d = Driver(numbers={"ALIVE_INTERVAL": 10, "MAX_CLAIM_ALIVES_MISSED": 3})
    d.busy()
    d.tick(25)
    d.do(d.engine.alive("slot1", d.clock.now()))
    d.tick(25)
    assert d.pair == "Claimed/Busy"
    d.tick(5)
    assert d.pair == "Preempting/Killing"


def test_claim_worklife_zero_ends_claim_after_job() -> None:
    d = Driver({"CLAIM_WORKLIFE": "0"})
    d.busy()
    d.clock.advance(1)
    d.starter_exited()
    assert d.pair == "Unclaimed/Idle"
    assert d.transitions()[-5:] == ["12", "c1", "10", "22", "1"]


def test_26_to_32_backfill() -> None:
    d = Driver({"START_BACKFILL": "KeyboardIdle > 60", "EVICT_BACKFILL": "KeyboardIdle < 60"},
               backfill=True)
    assert d.pair == "Backfill/Busy"
    assert d.transitions() == ["1", "7", "26"]
    d.do(d.engine.backfill_client_exited(d.clock.now()))
    assert d.transitions()[-2:] == ["27", "26"]
    d.set_facts(KeyboardIdle=1)
    d.tick(5)
    assert d.pair == "Backfill/Killing" and d.of_type(act.KillBackfillClient)
    d.do(d.engine.backfill_client_exited(d.clock.now()))
    assert d.transitions()[-3:] == ["29", "30", "1"]
    assert d.pair == "Unclaimed/Idle"


@pytest.mark.parametrize(("event", "number"), [("claim", "31"), ("match", "32")])
def test_31_32_leaving_backfill(event: str, number: str) -> None:
    d = Driver({"START_BACKFILL": "True"}, backfill=True)
    if event == "claim":
        d.claim()
    else:
        d.do(d.engine.match("slot1", d.clock.now()))
    assert d.pair == "Backfill/Killing"
    d.do(d.engine.backfill_client_exited(d.clock.now()))
    assert number in d.transitions()


def test_33_35_37_drain_and_cancel() -> None:
    d = Driver()
    d.do(d.engine.drain("graceful", d.clock.now()))
    assert d.transitions()[-2:] == ["37", "33"]
    assert d.engine.attributes("slot1", d.clock.now())["Requirements"] is False
    d.do(d.engine.cancel_drain(d.clock.now()))
    assert d.transitions()[-2:] == ["34", "1"]


def test_36_drain_from_owner() -> None:
    d = Driver({"START": "False", "IS_OWNER": "START =?= False"})
    d.do(d.engine.drain("quick", d.clock.now()))
    assert "36" in d.transitions()


def test_impossible_transition_names_state_and_event() -> None:
    d = Driver()
    with pytest.raises(PolicyError, match=r"Unclaimed/Idle"):
        d.do(d.engine.benchmarks_done("slot1", d.clock.now()))
