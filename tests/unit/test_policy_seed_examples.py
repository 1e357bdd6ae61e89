"""The worked examples of seed 003 ("Examples of Policy Configuration") as tests."""

from __future__ import annotations

from datetime import UTC, datetime

from execd.policy import actions as act
from tests.unit.policy_helpers import Driver

CPU_IDLE = "((LoadAvg - CondorLoadAvg) <= 0.3)"
DESKTOP = {
    "START": f"(KeyboardIdle > 15 * 60) && {CPU_IDLE}",
    "IS_OWNER": "(START =?= False)",
    "WANT_SUSPEND": "True",
    "SUSPEND": "(KeyboardIdle < 60) || ((LoadAvg - CondorLoadAvg) > 0.5)",
    "CONTINUE": f"(KeyboardIdle > 15 * 60) && {CPU_IDLE}",
    "PREEMPT": '(Activity == "Suspended") && ((MyCurrentTime - EnteredCurrentActivity) > 600)',
    "KILL": "((MyCurrentTime - EnteredCurrentActivity) > 600)",
}


def test_desktop_policy_suspends_then_preempts_then_kills() -> None:
    d = Driver(DESKTOP)
    assert d.pair == "Unclaimed/Idle"
    d.busy()
    d.set_facts(KeyboardIdle=5)
    d.tick(5)
    assert d.pair == "Claimed/Suspended"
    d.tick(600)
    assert d.pair == "Claimed/Suspended"
    d.tick(5)  # suspended for more than 10 minutes: PREEMPT; retirement 0 -> vacate
    assert d.pair == "Preempting/Vacating"
    assert act.Continue("slot1") in d.actions and act.SoftKill("slot1") in d.actions
    d.tick(605)
    assert d.pair == "Preempting/Killing"
    d.starter_exited()
    assert d.pair == "Owner/Idle"  # the owner is still typing


def test_desktop_start_undefined_for_other_users_leaves_owner() -> None:
    # START = KeyboardIdle > 15 min || Owner == "coltrane": locally UNDEFINED, not FALSE.
    d = Driver({"START": '(KeyboardIdle > 15 * 60) || Owner == "coltrane"',
                "IS_OWNER": "(START =?= False)"}, facts={"KeyboardIdle": 34})
    assert d.pair == "Unclaimed/Idle"
    assert d.claim({"Owner": "coltrane"})
    d2 = Driver({"START": '(KeyboardIdle > 15 * 60) || Owner == "coltrane"',
                 "IS_OWNER": "(START =?= False)"}, facts={"KeyboardIdle": 34})
    assert not d2.claim({"Owner": "alice"})


def test_test_job_policy_for_coltrane() -> None:
    policy = dict(DESKTOP)
    policy["START"] = f'({DESKTOP["START"]}) || Owner == "coltrane"'
    policy["SUSPEND"] = f'({DESKTOP["SUSPEND"]}) && Owner != "coltrane"'
    policy["PREEMPT"] = f'({DESKTOP["PREEMPT"]}) && Owner != "coltrane"'
    d = Driver(policy, facts={"KeyboardIdle": 5, "LoadAvg": 0.0, "CondorLoadAvg": 0.0})
    assert not d.claim({"Owner": "alice"})
    d.busy({"Owner": "coltrane"})
    d.tick(5)
    d.tick_with_alives(5000)
    assert d.pair == "Claimed/Busy"  # never suspended, vacated or killed


def _at(d: Driver, when: datetime) -> None:
    d.clock.wall = when.timestamp()


def test_time_of_day_policy() -> None:
    after_hours = ("((ClockMin < 480 || ClockMin >= 1020) || "
                   "(ClockDay == 0 || ClockDay == 6))")
    d = Driver({"START": after_hours})
    _at(d, datetime(2023, 11, 15, 10, 0, tzinfo=UTC))  # a Wednesday, 10:00
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert (attrs["ClockMin"], attrs["ClockDay"]) == (600, 3)
    assert not d.claim()
    _at(d, datetime(2023, 11, 15, 20, 0, tzinfo=UTC))
    assert d.claim()
    _at(d, datetime(2023, 11, 18, 11, 0, tzinfo=UTC))  # Saturday
    assert d.engine.attributes("slot1", d.clock.now())["ClockDay"] == 6


BASS_RANK = ('(Owner == "coltrane") + (Owner == "tyner") + ((Owner == "garrison") * 10)'
             ' + (Owner == "jones")')


def test_rank_on_bass_jones_preempts_outsider_and_garrison_preempts_jones() -> None:
    d = Driver({"RANK": BASS_RANK})
    d.busy({"Owner": "outsider"})
    assert d.slot.claim.rank == 0
    assert d.claim({"Owner": "jones"})
    d.starter_exited()
    assert d.pair == "Claimed/Idle" and d.slot.claim.rank == 1
    assert d.activate({"Owner": "jones"})
    assert d.claim({"Owner": "garrison"})
    d.starter_exited()
    assert d.slot.claim.rank == 10


def test_rank_equal_does_not_preempt() -> None:
    d = Driver({"RANK": 'Owner == "coltrane" || Owner == "tyner"'})
    d.busy({"Owner": "tyner"})
    assert not d.claim({"Owner": "coltrane"})
    assert d.pair == "Claimed/Busy"


def test_rank_imagesize_on_piano_and_tenorsax() -> None:
    d = Driver({"RANK": "ImageSize"})
    d.busy({"Owner": "a", "ImageSize": 100})
    assert d.claim({"Owner": "b", "ImageSize": 1000})
    t = Driver({"RANK": '(Owner == "coltrane") * 1000000000000 + ImageSize'})
    t.busy({"Owner": "a", "ImageSize": 10**9})
    assert t.claim({"Owner": "coltrane", "ImageSize": 1})


def test_suspendable_and_non_suspendable_slots() -> None:
    policy = {"WANT_SUSPEND": "SlotID == 1", "SUSPEND": "KeyboardIdle < 60",
              "PREEMPT": "(WANT_SUSPEND =!= True) && KeyboardIdle < 60"}
    one = Driver(policy, facts={"SlotID": 1, "KeyboardIdle": 3600})
    two = Driver(policy, facts={"SlotID": 2, "KeyboardIdle": 3600})
    for d in (one, two):
        d.busy()
        d.set_facts(KeyboardIdle=1)
        d.tick(5)
    assert one.pair == "Claimed/Suspended"
    assert two.pair == "Preempting/Vacating"


def test_maxjobretirementtime_disables_preemption_by_rank() -> None:
    d = Driver({"RANK": 'Owner == "boss"', "MAXJOBRETIREMENTTIME": "3600"})
    d.busy({"Owner": "alice"})
    assert d.claim({"Owner": "boss"})
    d.tick_with_alives(2900)  # vacating would start at 3600 - MachineMaxVacateTime
    assert d.pair == "Claimed/Retiring"  # the job keeps running
    d.starter_exited()  # and finishes on its own
    assert d.pair == "Claimed/Idle" and d.slot.claim.rank == 1
    assert not d.of_type(act.SoftKill) and not d.of_type(act.HardKill)


def test_claim_worklife_forces_renegotiation_without_preemption() -> None:
    d = Driver({"CLAIM_WORKLIFE": "3600"})
    d.busy()
    d.tick_with_alives(4000)
    assert d.pair == "Claimed/Busy"  # running job untouched
    d.starter_exited()
    assert d.pair == "Unclaimed/Idle"  # but the claim is closed afterwards
