"""Daemon-wide events: draining (seed 003 "Drained State") and shutdown."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from execd import classads
from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.slot import Now, Slot
from execd.policy.states import Activity, State

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine

S, A = State, Activity
Actions = list[act.Action]


def drain_done(engine: PolicyEngine, slot: Slot) -> bool:
    """A drained slot is done when no other slot still holds a claim."""
    return not any(s.claim is not None for s in engine.slots.values() if s is not slot
                   and s.state != State.DRAINED)


def shutdown(engine: PolicyEngine, mode: str, now: Now) -> Actions:
    """graceful: retire then vacate; peaceful: infinite retirement; fast: kill."""
    if mode not in ("graceful", "peaceful", "fast"):
        raise PolicyError(f"unknown shutdown mode {mode!r}")
    engine.shutting_down = mode
    out: Actions = []
    for slot in list(engine.slots.values()):
        if slot.state == S.CLAIMED:
            if mode == "fast":
                engine._evict(slot, now, out, "shutdown", kill=True)
                continue
            if mode == "peaceful":
                slot.retirement_override = math.inf
            slot.preempting_claim = None
            if slot.activity == A.IDLE:
                engine._evict(slot, now, out, "shutdown")
            else:
                engine._retire(slot, "shutdown", now, out)
        elif slot.state == S.PREEMPTING and mode == "fast" and slot.activity == A.VACATING:
            engine._move(slot, "kill", now, out)
            out.append(act.HardKill(slot.name))
        elif slot.state == S.BACKFILL:
            slot.backfill_leave_to = "owner"
            out += engine._leave_backfill(slot, now)
    return out + engine.evaluate(now)

def drain(engine: PolicyEngine, mode: str, now: Now, *, reason: str = "",
          check: str | None = None, resume_on_completion: bool = False) -> Actions:
    """Drain every slot: graceful (retirement honoured), quick (vacate), fast (kill)."""
    if mode not in ("graceful", "quick", "fast"):
        raise PolicyError(f"unknown drain mode {mode!r}")
    if check is not None:  # all slots must pass the check before anything changes
        for slot in engine.slots.values():
            value = classads.evaluate(check, engine.machine_ad(slot, now))
            if not classads.is_true(value):
                raise PolicyError(f"drain check {check!r} is not true on {slot.name}")
    engine.drain_reason, engine.drain_resume = reason, resume_on_completion
    out: Actions = []
    engine.draining = True
    for slot in list(engine.slots.values()):
        if slot.state == S.CLAIMED:
            slot.preempting_claim = None
            if mode == "fast":
                engine._evict(slot, now, out, "drain", kill=True)
            elif mode == "quick" or slot.activity == A.IDLE:
                engine._evict(slot, now, out, "drain")
            else:
                engine._retire(slot, "drain", now, out)
        elif slot.state == S.BACKFILL:
            slot.backfill_leave_to = "owner"
            out += engine._leave_backfill(slot, now)
    for slot in list(engine.slots.values()):
        if not slot.dynamic and slot.state in (S.OWNER, S.UNCLAIMED) \
                and slot.activity == A.IDLE:
            engine._move(slot, "drain", now, out)
    return out + engine.evaluate(now)

def cancel_drain(engine: PolicyEngine, now: Now) -> Actions:
    """Drained -> Owner (34/35) -> Unclaimed at the next evaluation."""
    out: Actions = []
    engine.draining = False
    for slot in engine.slots.values():
        if slot.state == S.DRAINED:
            engine._move(slot, "drain_cancelled", now, out)
    return out + engine.evaluate(now)
