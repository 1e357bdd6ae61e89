"""Shutdown (graceful, peaceful, fast), draining, vacate-time conversion."""

from __future__ import annotations

import pytest

from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.retirement import vacate_time
from tests.unit.policy_helpers import Driver


def test_graceful_shutdown_retires_then_vacates() -> None:
    d = Driver({"MAXJOBRETIREMENTTIME": "100", "MachineMaxVacateTime": "10"})
    d.busy()
    d.do(d.engine.shutdown("graceful", d.clock.now()))
    assert d.pair == "Claimed/Retiring"
    d.tick_with_alives(89, step=1)
    assert d.pair == "Claimed/Retiring"
    d.tick(1)
    assert d.pair == "Preempting/Vacating" and act.SoftKill("slot1") in d.actions
    d.starter_exited()
    assert d.slot.claim is None


def test_peaceful_shutdown_never_kills() -> None:
    d = Driver({"MAXJOBRETIREMENTTIME": "100"})
    d.busy()
    d.do(d.engine.shutdown("peaceful", d.clock.now()))
    d.tick_with_alives(10_000)
    assert d.pair == "Claimed/Retiring"
    assert not d.of_type(act.SoftKill) and not d.of_type(act.HardKill)


def test_fast_shutdown_kills_without_retirement() -> None:
    d = Driver({"MAXJOBRETIREMENTTIME": "100"})
    d.busy()
    d.do(d.engine.shutdown("fast", d.clock.now()))
    assert d.pair == "Preempting/Killing"
    assert act.HardKill("slot1") in d.actions and not d.of_type(act.SoftKill)


def test_unknown_shutdown_mode_is_an_error() -> None:
    with pytest.raises(PolicyError, match="shutdown mode"):
        Driver().engine.shutdown("sideways", Driver().clock.now())


def test_graceful_drain_honours_retirement_then_drains() -> None:
    d = Driver({"MAXJOBRETIREMENTTIME": "100", "MachineMaxVacateTime": "0"})
    d.busy()
    d.do(d.engine.drain("graceful", d.clock.now()))
    assert d.pair == "Claimed/Retiring"
    d.tick_with_alives(50)
    assert d.pair == "Claimed/Retiring"
    d.starter_exited()
    assert d.slot.state.value == "Drained"
    assert d.engine.attributes("slot1", d.clock.now())["Start"] is False


def test_quick_drain_vacates_and_fast_drain_kills() -> None:
    q = Driver({"MAXJOBRETIREMENTTIME": "100"})
    q.busy()
    q.do(q.engine.drain("quick", q.clock.now()))
    assert q.pair == "Preempting/Vacating"
    f = Driver({"MAXJOBRETIREMENTTIME": "100"})
    f.busy()
    f.do(f.engine.drain("fast", f.clock.now()))
    assert f.pair == "Preempting/Killing"


def test_job_vacate_time_lowers_machine_and_borrows_from_retirement() -> None:
    d = Driver({"MachineMaxVacateTime": "60", "MAXJOBRETIREMENTTIME": "1000"})
    d.busy({"JobMaxVacateTime": 10})
    assert vacate_time(d.engine, d.slot, d.clock.now()) == 10
    e = Driver({"MachineMaxVacateTime": "60", "MAXJOBRETIREMENTTIME": "1000"})
    e.busy({"JobMaxVacateTime": 300})
    assert vacate_time(e.engine, e.slot, e.clock.now()) == 300  # converted from retirement
    f = Driver({"MachineMaxVacateTime": "60", "MAXJOBRETIREMENTTIME": "0"})
    f.busy({"JobMaxVacateTime": 300})
    assert vacate_time(f.engine, f.slot, f.clock.now()) == 60  # no retirement to convert


def test_backfill_left_on_shutdown() -> None:
    d = Driver({"START_BACKFILL": "True"}, backfill=True)
    assert d.pair == "Backfill/Busy"
    d.do(d.engine.shutdown("graceful", d.clock.now()))
    assert d.pair == "Backfill/Killing" and d.of_type(act.KillBackfillClient)


def test_want_hold_puts_evicted_job_on_hold_with_reason() -> None:
    d = Driver({"PREEMPT": "True", "WANT_HOLD": "TARGET.Owner == \"alice\"",
                "WANT_HOLD_REASON": '"used too much"', "WANT_HOLD_SUBCODE": "42"})
    d.busy()
    d.tick(5)
    assert d.of_type(act.HoldJob) == [act.HoldJob("slot1", "used too much", 42)]


def test_reconfig_reevaluates_at_once() -> None:
    from execd.policy.config import PolicyConfig

    d = Driver()
    d.do(d.engine.reconfig(PolicyConfig.from_strings(
        {"START": "False", "IS_OWNER": "START =?= False"}), d.clock.now()))
    assert d.pair == "Owner/Idle"


def test_drain_check_expression_refuses_without_changes() -> None:
    d = Driver()
    d.busy()
    with pytest.raises(PolicyError, match="drain check"):
        d.do(d.engine.drain("graceful", d.clock.now(), check='State == "Unclaimed"'))
    assert d.pair == "Claimed/Busy"


def test_drain_reason_badput_and_resume_on_completion() -> None:
    d = Driver({"MAXJOBRETIREMENTTIME": "100"})
    d.busy()
    d.tick_with_alives(30)
    d.do(d.engine.drain("quick", d.clock.now(), reason="kernel update",
                        resume_on_completion=True))
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert attrs["DrainReason"] == "kernel update"
    assert attrs["TotalMachineDrainingBadput"] == 30
    d.starter_exited()
    # Owner (22) is left for Unclaimed at once (IS_OWNER false), which drains (37)
    assert d.transitions()[-6:] == ["22", "1", "37", "33", "34", "1"]
    assert d.pair == "Unclaimed/Idle"
