"""Claimed/Cleaning, unretirement (19), CpuBusy/CpuBusyTime, and what the ad says."""

from __future__ import annotations

import pytest

from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.config import PolicyConfig
from tests.unit.policy_helpers import Driver


def _events(d: Driver, name: str) -> list[act.LogEvent]:
    return [a for a in d.actions if isinstance(a, act.LogEvent) and a.event == name]


def test_normal_job_end_passes_cleaning_and_keeps_the_claim() -> None:
    d = Driver()
    d.busy()
    d.do(d.engine.job_exited("slot1", d.clock.now()))
    assert d.pair == "Claimed/Cleaning"
    assert d.engine.attributes("slot1", d.clock.now())["Activity"] == "Cleaning"
    with pytest.raises(PolicyError, match="Claimed/Cleaning"):
        d.activate()  # the schedd waits for the starter to finish cleaning up
    d.tick(5)
    assert d.pair == "Claimed/Cleaning"  # no policy moves it: the starter's exit does
    d.starter_exited()
    assert d.pair == "Claimed/Idle"
    assert d.transitions()[-2:] == ["12", "c1"]
    assert d.activate()


def test_vacate_while_cleaning_soft_kills_the_starter_and_holds_nothing() -> None:
    d = Driver({"WANT_HOLD": "True"})
    d.busy()
    d.do(d.engine.job_exited("slot1", d.clock.now()))
    d.do(d.engine.vacate("slot1", d.clock.now()))
    assert d.pair == "Preempting/Vacating"
    assert d.transitions()[-1] == "c2"
    assert act.SoftKill("slot1") in d.actions and not d.of_type(act.HoldJob)
    d.starter_exited()
    assert d.pair == "Unclaimed/Idle"


def test_job_end_while_retiring_goes_through_cleaning_then_preempting() -> None:
    d = Driver({"PREEMPT": "True", "MAXJOBRETIREMENTTIME": "3600"})
    d.busy()
    d.tick(5)
    assert d.pair == "Claimed/Retiring"
    d.starter_exited()
    assert d.transitions()[-5:] == ["18", "c1", "10", "22", "1"]
    assert d.pair == "Unclaimed/Idle"


def _rank_retiring() -> tuple[Driver, object]:
    d = Driver({"RANK": 'TARGET.Owner == "boss"', "MAXJOBRETIREMENTTIME": "3600"},
               numbers={"ALIVE_INTERVAL": 10, "MAX_CLAIM_ALIVES_MISSED": 3})
    d.busy({"Owner": "alice"})
    boss = d.ids.new()
    accepted = d.do(d.engine.request_claim("slot1", boss, {"Owner": "boss"},
                                           d.clock.now()))
    assert accepted and d.pair == "Claimed/Retiring"
    return d, boss


def test_19_unretire_when_the_preempting_claim_is_released() -> None:
    d, boss = _rank_retiring()
    d.do(d.engine.release("slot1", d.clock.now(), claim_id=boss))  # type: ignore[arg-type]
    assert d.pair == "Claimed/Busy"
    assert d.transitions()[-1] == "19"
    assert _events(d, "preempting_claim_withdrawn")[0].fields["why"] == "released"
    assert d.slot.claim.request_ad["Owner"] == "alice"  # the running job kept its claim
    assert not d.of_type(act.SoftKill)


def test_no_19_for_a_waiting_preempting_claim_its_lease_starts_when_it_takes_the_slot(
        ) -> None:  # fmt: skip
    # condor_startd starts a claim's lease timer when it becomes the slot's claim
    # (Claim::beginClaim): a preempting claim waits out the retirement, however long
    d, boss = _rank_retiring()
    alice = d.slot.claim.id
    for _ in range(10):  # only the running job's schedd keeps sending alives
        d.do(d.engine.alive("slot1", d.clock.now(), alice))
        d.tick(10)  # boss's lease (30 s) would be long over
    assert d.pair == "Claimed/Retiring" and "19" not in d.transitions()
    assert not _events(d, "preempting_claim_withdrawn")
    d.starter_exited()  # the job ends: boss's claim takes the slot
    assert d.pair == "Claimed/Idle" and d.slot.claim.id == boss
    assert act.ClaimTookSlot("slot1", str(boss)) in d.actions
    d.tick(29)
    assert d.pair == "Claimed/Idle"
    d.tick(2)  # 31 s after it took the slot, with no alive: its lease is over
    assert d.pair != "Claimed/Idle"


def test_a_drain_keeps_the_waiting_preempting_claim_and_its_start_refuses_it() -> None:
    """As condor_startd: the drain leaves the waiting claim be; the job's end hands the
    slot over only if START allows, which a drain's START (False) does not."""
    d, boss = _rank_retiring()
    d.do(d.engine.drain("graceful", d.clock.now()))
    assert d.slot.preempting_claim is not None and d.slot.preempting_claim.id == boss
    assert not _events(d, "preempting_claim_withdrawn")
    d.starter_exited()
    assert d.slot.preempting_claim is None and d.slot.claim is None
    assert act.NotifyClaimHolder("slot1", str(boss), "START is false") in d.actions
    assert _events(d, "preempting_claim_withdrawn")[0].fields["why"] == "START is false"


def test_no_unretire_for_preempt_and_withdrawing_nothing_is_an_error() -> None:
    d = Driver({"PREEMPT": "True", "MAXJOBRETIREMENTTIME": "3600"})
    d.busy()
    d.tick(5)
    assert d.pair == "Claimed/Retiring"
    with pytest.raises(PolicyError, match="no preempting claim"):
        d.do(d.engine.withdraw_preempting_claim("slot1", d.clock.now()))
    d.tick(5)
    assert d.pair == "Claimed/Retiring"


def test_cpu_busy_time_counts_while_cpubusy_is_true() -> None:
    d = Driver({"CPUBusy": "(LoadAvg - CondorLoadAvg) >= 0.5"})
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert attrs["CpuBusy"] is False and attrs["CpuBusyTime"] == 0
    d.set_facts(LoadAvg=1.0)
    d.tick(5)
    d.tick(30)
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert attrs["CpuBusy"] is True and attrs["CpuBusyTime"] == 30
    d.set_facts(LoadAvg=0.0)
    d.tick(5)
    assert d.engine.attributes("slot1", d.clock.now())["CpuBusyTime"] == 0


def test_seed_suspend_on_cpu_busy_time_over_two_minutes() -> None:
    # seed 000's UWCS-style SUSPEND: CpuBusyTime > 2 * $(MINUTE)
    d = Driver({"CPUBusy": "(LoadAvg - CondorLoadAvg) >= 0.5", "WANT_SUSPEND": "True",
                "SUSPEND": "CpuBusyTime > 2 * 60", "CONTINUE": "CpuBusyTime == 0"})
    d.busy()
    d.set_facts(LoadAvg=2.0)
    d.tick(5)
    d.tick_with_alives(120, step=10)
    assert d.pair == "Claimed/Busy"
    d.tick(10)
    assert d.pair == "Claimed/Suspended"
    d.set_facts(LoadAvg=0.0)
    d.tick(5)
    assert d.pair == "Claimed/Busy"


def test_requirements_false_while_preempting() -> None:
    d = Driver({"PREEMPT": "True"})
    d.busy()
    d.tick(5)
    assert d.pair == "Preempting/Vacating"
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert attrs["Requirements"] is False and attrs["Start"] is False


def test_bad_expression_logged_again_after_it_changes() -> None:
    d = Driver({"PREEMPT": '"not a bool"'})
    d.busy()
    d.tick(5)
    d.do(d.engine.reconfig(PolicyConfig.from_strings({"PREEMPT": "1 / \"x\""}),
                           d.clock.now()))
    d.tick(5)
    d.tick(5)
    errors = _events(d, "policy_expression_error")
    assert [e.fields["text"] for e in errors] == ['"not a bool"', '1 / "x"']
    assert d.pair == "Claimed/Busy"


def test_unscoped_job_attribute_in_a_policy_expression_still_reads_the_job() -> None:
    # Owner is not in the machine ad: the engine must evaluate with the job as TARGET
    d = Driver({"WANT_SUSPEND": "True", "SUSPEND": 'Owner == "alice"', "CONTINUE": "False"})
    d.busy({"Owner": "alice"})
    d.tick(5)
    assert d.pair == "Claimed/Suspended"
    d2 = Driver({"WANT_SUSPEND": "True", "SUSPEND": 'Owner == "alice"'})
    d2.busy({"Owner": "bob"})
    d2.tick(5)
    assert d2.pair == "Claimed/Busy"


def test_drain_check_sees_attributes_no_policy_expression_reads() -> None:
    d = Driver()
    d.busy()
    d.tick_with_alives(30)
    with pytest.raises(PolicyError, match="drain check"):
        d.do(d.engine.drain("quick", d.clock.now(), check="TotalClaimRunTime >= 60"))
    d.do(d.engine.drain("quick", d.clock.now(), check="TotalClaimRunTime >= 30"))
    assert d.pair == "Preempting/Vacating"


def test_deactivate_stops_the_job_but_keeps_the_claim() -> None:
    d = Driver()
    d.busy()
    claim = d.slot.claim
    d.do(d.engine.deactivate("slot1", d.clock.now()))
    assert act.SoftKill("slot1") in d.actions and d.pair == "Claimed/Busy"
    d.starter_exited()
    assert d.pair == "Claimed/Idle" and d.slot.claim is claim
    assert not d.of_type(act.NotifyClaimHolder)
    with pytest.raises(PolicyError, match="nothing to deactivate"):
        d.do(d.engine.deactivate("slot1", d.clock.now(), fast=True))
    assert d.activate()


def test_vanilla_variants_apply_to_vanilla_jobs_only() -> None:
    policy = {"WANT_SUSPEND": "True", "SUSPEND": "False", "SUSPEND_VANILLA": "True",
              "CONTINUE": "False"}
    vanilla, other = Driver(policy), Driver(policy)
    vanilla.busy({"Owner": "a", "JobUniverse": 5})
    other.busy({"Owner": "a", "JobUniverse": 7})
    vanilla.tick(5)
    other.tick(5)
    assert vanilla.pair == "Claimed/Suspended" and other.pair == "Claimed/Busy"


def test_requirements_true_when_start_is_true_whatever_the_job() -> None:
    d = Driver()
    assert d.engine.attributes("slot1", d.clock.now())["Requirements"] is True
    d2 = Driver({"START": 'TARGET.Owner == "bob"'})
    attrs = d2.engine.attributes("slot1", d2.clock.now())
    assert str(attrs["Requirements"]) == 'TARGET.Owner == "bob"'
    assert str(attrs["Start"]) == 'TARGET.Owner == "bob"'


def test_facts_update_in_place_and_policy_attributes_win_over_facts() -> None:
    from execd.policy.slot import POLICY_ATTRIBUTES

    d = Driver({"WANT_SUSPEND": "True", "SUSPEND": "KeyboardIdle < 60", "CONTINUE": "False"})
    d.busy()
    d.tick(5)
    ad = d.slot.ad
    d.set_facts(KeyboardIdle=1)  # a changed fact is written into the same ad
    assert d.slot.ad is ad and ad["KeyboardIdle"] == 1
    d.tick(5)
    assert d.pair == "Claimed/Suspended"
    d.set_facts(Activity="Idle")  # a resource ad must not override the engine's Activity
    assert d.slot.ad is ad
    d.tick(5)
    full = d.engine.machine_ad(d.slot, d.clock.now(), full=True)
    assert full["Activity"] == "Suspended" and full["KeyboardIdle"] == 1
    d.do(d.engine.drain("graceful", d.clock.now(), start="True"))
    written = set(d.slot.ad_policy_values) | set(d.engine.attributes("slot1", d.clock.now()))
    assert written - POLICY_ATTRIBUTES == {
        "TotalMachineDrainingBadput", "TotalMachineDrainingUnclaimedTime", "DrainReason",
        "ExpectedMachineGracefulDrainingBadput", "ExpectedMachineQuickDrainingBadput",
        "ExpectedMachineGracefulDrainingCompletion", "ExpectedMachineQuickDrainingCompletion",
        "SlotWeight", "MaxJobRetirementTime", "MachineMaxVacateTime"}


def test_release_names_the_claim_it_ends() -> None:
    d, boss = _rank_retiring()
    alice = d.slot.claim.id
    with pytest.raises(PolicyError, match="does not hold"):
        d.do(d.engine.release("slot1", d.clock.now(), d.ids.new()))
    assert d.pair == "Claimed/Retiring"
    d.do(d.engine.release("slot1", d.clock.now(), alice))  # the running job's own claim
    assert d.pair == "Preempting/Killing"
    d.starter_exited()
    assert d.pair == "Claimed/Idle" and d.slot.claim.id == boss  # the waiting claim got it


def test_retirement_time_remaining_is_published_as_the_startd_does() -> None:
    """RetirementTimeRemaining (rolled up as ChildRetirementTimeRemaining): 0 without a
    job, MAXJOBRETIREMENTTIME less the job's run time (a job may lower it), and
    HTCondor's INT_MAX less the run time while a peaceful shutdown retires it."""
    d = Driver({"MAXJOBRETIREMENTTIME": "100"})
    assert d.engine.attributes("slot1", d.clock.now())["RetirementTimeRemaining"] == 0
    d.busy()
    d.tick(30)
    assert d.engine.attributes("slot1", d.clock.now())["RetirementTimeRemaining"] == 70
    d.tick(80)
    assert d.engine.attributes("slot1", d.clock.now())["RetirementTimeRemaining"] == 0
    lower = Driver({"MAXJOBRETIREMENTTIME": "100"})
    lower.busy({"Owner": "alice", "MaxJobRetirementTime": 40})
    lower.tick(10)
    assert lower.engine.attributes("slot1", lower.clock.now())["RetirementTimeRemaining"] == 30
    peaceful = Driver()
    peaceful.busy()
    peaceful.tick(5)
    peaceful.do(peaceful.engine.shutdown("peaceful", peaceful.clock.now()))
    attrs = peaceful.engine.attributes("slot1", peaceful.clock.now())
    assert attrs["RetirementTimeRemaining"] == 2**31 - 1 - 5
