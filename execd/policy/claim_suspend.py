"""The claim holder's SUSPEND_CLAIM and CONTINUE_CLAIM (HTCondor's startd: a claim
suspended by command is resumed only by command, never by the CONTINUE expression).

Claimed/Busy or Claimed/Retiring -> Claimed/Suspended (transitions 14/20) and the
starter is stopped; CONTINUE_CLAIM -> back to Busy (15) or Retiring (16) and the
starter continues. Anything else is a PolicyError naming the slot's state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.slot import Now
from execd.policy.states import Activity, State, label

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine

Actions = list[act.Action]


def suspend_claim(engine: PolicyEngine, name: str, now: Now) -> Actions:
    slot = engine.slot(name)
    if slot.state != State.CLAIMED or slot.activity not in (Activity.BUSY, Activity.RETIRING):
        raise PolicyError(f"cannot suspend the claim on {name} in "
                          f"{label(slot.state, slot.activity)}")  # fmt: skip
    out: Actions = []
    engine._move(slot, "suspend", now, out)
    slot.suspended_since = now.mono
    slot.suspended_by_command = True
    out.append(act.Suspend(name))
    return out


def continue_claim(engine: PolicyEngine, name: str, now: Now) -> Actions:
    slot = engine.slot(name)
    if slot.activity != Activity.SUSPENDED or not slot.suspended_by_command:
        raise PolicyError(f"cannot continue the claim on {name} in "
                          f"{label(slot.state, slot.activity)}: not suspended by SUSPEND_CLAIM")
    out: Actions = []
    slot.suspended_by_command = False
    engine._move(slot, "continue" if slot.retire_reason is None else "continue_retiring",
                 now, out)  # fmt: skip
    engine._resume(slot, now, out)
    return out
