"""SUSPEND_CLAIM / CONTINUE_CLAIM in the policy engine: a claim suspended by its holder
stays suspended whatever CONTINUE says, until CONTINUE_CLAIM (HTCondor's startd)."""

from __future__ import annotations

import pytest

from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.claim_suspend import continue_claim, suspend_claim
from tests.unit.policy_helpers import Driver


def test_suspended_by_command_until_continued_by_command() -> None:
    d = Driver({"START": "true", "SUSPEND": "false", "CONTINUE": "true",
                "WANT_SUSPEND": "true", "PREEMPT": "false"})  # fmt: skip
    d.busy()
    d.do(suspend_claim(d.engine, "slot1", d.clock.now()))
    assert d.pair == "Claimed/Suspended"
    assert d.of_type(act.Suspend) == [act.Suspend("slot1")]
    d.tick(60)  # CONTINUE is true, yet the holder's suspension holds
    assert d.pair == "Claimed/Suspended" and not d.of_type(act.Continue)
    d.do(continue_claim(d.engine, "slot1", d.clock.now()))
    assert d.pair == "Claimed/Busy"
    assert d.of_type(act.Continue) == [act.Continue("slot1")]
    assert d.slot.job_suspend_total == pytest.approx(60)
    assert d.transitions()[-2:] == ["14", "15"]


def test_suspend_and_continue_refuse_the_wrong_states() -> None:
    d = Driver({"START": "true"})
    with pytest.raises(PolicyError, match="Unclaimed/Idle"):
        suspend_claim(d.engine, "slot1", d.clock.now())
    d.busy()
    with pytest.raises(PolicyError, match="not suspended by SUSPEND_CLAIM"):
        continue_claim(d.engine, "slot1", d.clock.now())
    assert d.pair == "Claimed/Busy"
