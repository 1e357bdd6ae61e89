"""Claim-holder commands (suspend, continue, deactivate) and restoring after a restart."""

from __future__ import annotations

import pytest

from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy import commands
from tests.unit.policy_helpers import Driver

# a policy that would suspend on its own and wake at once: CONTINUE is always true
POLICY = {"WANT_SUSPEND": "True", "SUSPEND": "False", "CONTINUE": "True"}


def test_suspend_by_command_is_14_and_continue_expression_does_not_wake_it() -> None:
    d = Driver(POLICY)
    d.tick()
    d.busy()
    d.do(commands.suspend_claim(d.engine, "slot1", d.clock.now()))
    assert d.pair == "Claimed/Suspended"
    assert d.transitions()[-1] == "14"
    assert d.of_type(act.Suspend) == [act.Suspend("slot1")]
    d.tick(60)
    assert d.pair == "Claimed/Suspended"  # CONTINUE is true, but the holder suspended it
    d.do(commands.continue_claim(d.engine, "slot1", d.clock.now()))
    assert d.pair == "Claimed/Busy"
    assert d.transitions()[-1] == "15"
    assert d.of_type(act.Continue) == [act.Continue("slot1")]
    assert d.engine.attributes("slot1", d.clock.now())["TotalJobSuspendTime"] == 60


def test_suspend_and_continue_are_refused_with_a_reason() -> None:
    d = Driver(POLICY)
    d.tick()
    assert d.claim()
    with pytest.raises(PolicyError, match="no job runs"):
        commands.suspend_claim(d.engine, "slot1", d.clock.now())
    assert d.activate()
    with pytest.raises(PolicyError, match="not suspended"):
        commands.continue_claim(d.engine, "slot1", d.clock.now())


def test_deactivate_keeps_the_claim_release_does_not() -> None:
    d = Driver(POLICY)
    d.tick()
    d.busy()
    d.do(commands.suspend_claim(d.engine, "slot1", d.clock.now()))
    d.do(commands.deactivate(d.engine, "slot1", d.clock.now()))
    assert d.of_type(act.Continue) and d.of_type(act.SoftKill) == [act.SoftKill("slot1")]
    d.starter_exited()
    assert d.pair == "Claimed/Idle"
    assert d.slot.claim is not None
    assert d.activate()
    d.do(commands.deactivate(d.engine, "slot1", d.clock.now(), forceful=True))
    assert d.of_type(act.HardKill) == [act.HardKill("slot1")]
    d.starter_exited()
    d.do(d.engine.release("slot1", d.clock.now()))
    assert d.slot.claim is None
    assert d.pair == "Owner/Idle"


def test_restore_puts_back_claimed_busy_and_suspended_with_run_time_kept() -> None:
    d = Driver(POLICY)
    d.tick()
    claim = d.ids.new()
    now = d.clock.now()
    d.do(commands.restore_claim(d.engine, "slot1", claim, {"Owner": "alice"}, now,
                                lease_duration=1200, renewed_wall=now.wall))
    assert d.pair == "Claimed/Idle"
    assert d.slot.claim.id == claim
    d.do(commands.restore_job(d.engine, "slot1", {"Owner": "alice"}, now,
                              started_wall=now.wall - 30, suspended_by="command"))
    assert d.pair == "Claimed/Suspended"
    assert d.engine.attributes("slot1", d.clock.now())["TotalJobRunTime"] == 30
    d.tick(10)
    assert d.pair == "Claimed/Suspended"
    restored = [a for a in d.actions if isinstance(a, act.LogEvent) and a.event == "slot_restored"]
    assert [a.fields["new"] for a in restored] == ["Claimed/Idle", "Claimed/Suspended"]
    d.starter_exited()  # the job ended: the claim lives on
    assert d.pair == "Claimed/Idle"


def lease_expiries(d: Driver) -> list[act.LogEvent]:
    return [a for a in d.actions
            if isinstance(a, act.LogEvent) and a.event == "claim_lease_expired"]


def restored(lease_duration: float, renewed_ago: float) -> Driver:
    """A claim put back by a new daemon, last renewed `renewed_ago` s before the restart."""
    d = Driver(POLICY)
    d.tick()
    now = d.clock.now()
    d.do(commands.restore_claim(d.engine, "slot1", d.ids.new(), {"Owner": "alice"}, now,
                                lease_duration=lease_duration,
                                renewed_wall=now.wall - renewed_ago))
    return d


def test_a_restored_claims_lease_runs_on_from_its_last_renewal_before_the_outage() -> None:
    """Renewed 1190 s before the restart with a 1200 s lease: 10 s are left, not 1200."""
    d = restored(1200, 1190)
    d.tick(5)
    assert d.pair == "Claimed/Idle" and not lease_expiries(d)
    d.tick(6)
    assert lease_expiries(d)
    assert d.slot.claim is None


def test_a_claim_whose_lease_ran_out_during_the_outage_expires_at_once() -> None:
    d = restored(60, 3600)
    d.tick(0)
    assert lease_expiries(d)
