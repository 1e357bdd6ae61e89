"""Daemon-wide events: draining (seed 003 "Drained State", condor_drain) and shutdown.

A graceful drain may carry a start expression: for the drain's duration it replaces
START (and is published as Start), so idle resources can take short "scavenging" jobs.
Such claims are marked AcceptedWhileDraining. When the last job that was running when
draining began is gone, the scavenging jobs are evicted with no retirement (their vacate
time still holds), START becomes False and the slots drain (HTCondor's
DEFRAG_DRAINING_START_EXPR). TotalMachineDrainingBadput and
TotalMachineDrainingUnclaimedTime count cpu-seconds: job time thrown away by draining,
and slot time left unclaimed while draining.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from execd import classads
from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.preempting import drop_preempting_claim
from execd.policy.retirement import retirement_left
from execd.policy.slot import Now, Slot
from execd.policy.states import Activity, State

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine

S, A = State, Activity
Actions = list[act.Action]
FALSE = classads.parse_expr("False")


def cpus(slot: Slot) -> float:
    value = slot.facts.get("Cpus", 1)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 1.0


def drain_done(engine: PolicyEngine, slot: Slot) -> bool:
    """A drained slot is done when no other slot still holds a claim."""
    return not any(s.claim is not None for s in engine.slots.values() if s is not slot
                   and s.state != State.DRAINED)


def account_unclaimed(engine: PolicyEngine, slot: Slot, now: Now) -> None:
    """Add the cpu-seconds since the slot's mark if it sat unclaimed; move the mark."""
    mark = slot.drain_mark
    slot.drain_mark = now.mono if engine.draining and not slot.dynamic else None
    if mark is not None and slot.claim is None and slot.state not in (S.CLAIMED, S.PREEMPTING):
        engine.draining_unclaimed += cpus(slot) * max(0.0, now.mono - mark)


def finish_draining(engine: PolicyEngine, now: Now) -> None:
    """Draining ends (cancelled or resumed on completion): close the unclaimed-time count."""
    engine.draining = engine.drain_resume = engine.scavenging = False
    if engine.start_override is not None:
        engine.start_override = None
        engine._index_references()
    for slot in engine.slots.values():
        if slot.drain_mark is not None:
            account_unclaimed(engine, slot, now)


def add_badput(engine: PolicyEngine, slot: Slot, now: Now) -> None:
    if slot.job_start is not None:
        engine.draining_badput += cpus(slot) * slot.job_run_time(now.mono)


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
            drop_preempting_claim(slot, "shutdown", out)
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


def _parse_start(start: str | None, mode: str) -> Any:
    if start is None:
        return None
    if mode != "graceful":
        raise PolicyError("a drain start expression needs a graceful drain")
    try:
        return classads.parse_expr(start)
    except classads.ClassAdError as exc:
        raise PolicyError(f"drain start expression {start!r}: {exc}") from None


def drain(engine: PolicyEngine, mode: str, now: Now, *, reason: str = "",
          check: str | None = None, start: str | None = None,
          resume_on_completion: bool = False) -> Actions:
    """Drain every slot: graceful (retirement honoured), quick (vacate), fast (kill)."""
    if mode not in ("graceful", "quick", "fast"):
        raise PolicyError(f"unknown drain mode {mode!r}")
    start_expr = _parse_start(start, mode)
    if check is not None:  # all slots must pass the check before anything changes
        for slot in engine.slots.values():
            value = classads.evaluate(check, engine.machine_ad(slot, now, full=True))
            if not classads.is_true(value):
                raise PolicyError(f"drain check {check!r} is not true on {slot.name}")
    engine.drain_reason, engine.drain_resume = reason, resume_on_completion
    engine.draining = True
    engine.scavenging = start_expr is not None
    engine.start_override = None if start_expr is None else (start_expr, start or "")
    engine._index_references()
    out: Actions = []
    for slot in list(engine.slots.values()):
        if not slot.dynamic:
            slot.drain_mark = now.mono
        if slot.state == S.CLAIMED:
            # a waiting preempting claim stays: once the job is gone, the drain's START
            # refuses it (preempting.may_take_slot), as condor_startd does
            if mode == "fast":
                engine._evict(slot, now, out, "drain", kill=True)
            elif mode == "quick" or slot.activity == A.IDLE:
                engine._evict(slot, now, out, "drain", retire=True)
            else:
                engine._retire(slot, "drain", now, out)
        elif slot.state == S.BACKFILL:
            slot.backfill_leave_to = "owner"
            out += engine._leave_backfill(slot, now)
    if mode == "graceful":
        _coordinate_retirement(engine, now)
    check_scavenging(engine, now, out)
    if not engine.scavenging:
        for slot in list(engine.slots.values()):
            if not slot.dynamic and slot.state in (S.OWNER, S.UNCLAIMED) \
                    and slot.activity == A.IDLE:
                engine._move(slot, "drain", now, out)
    return out + engine.evaluate(now)


def _coordinate_retirement(engine: PolicyEngine, now: Now) -> None:
    """condor_drain -graceful (HTCondor 25 manual): the machine is not drained before its
    longest retirement ends, so every job retiring for the drain may run that long."""
    retiring = [s for s in engine.slots.values() if s.state == S.CLAIMED
                and s.retire_reason == "drain" and s.job_start is not None]
    left = [retirement_left(engine, s, now) for s in retiring]
    longest = max(left, default=0.0)
    if longest <= 0 or math.isinf(longest):
        return
    for slot in retiring:
        slot.retirement_override = slot.job_run_time(now.mono) + longest


def check_scavenging(engine: PolicyEngine, now: Now, out: Actions) -> None:
    """End scavenging once no job that predates the drain is left (see the module doc)."""
    if not engine.scavenging:
        return
    if any(s.claim is not None and not s.claim.accepted_while_draining
           for s in engine.slots.values()):
        return
    engine.scavenging = False
    engine.start_override = (FALSE, "False")
    engine._index_references()
    out.append(act.LogEvent("drain_scavenging_over", {"reason": engine.drain_reason}))
    for slot in list(engine.slots.values()):
        if slot.state != S.CLAIMED:
            continue
        slot.retirement_override = 0.0
        if slot.activity == A.IDLE:
            engine._evict(slot, now, out, "drain")
        else:
            engine._retire(slot, "drain", now, out)
            out += engine._evaluate_slot(slot, now)  # zero retirement: vacate at once


def cancel_drain(engine: PolicyEngine, now: Now) -> Actions:
    """Drained -> Owner (34/35) -> Unclaimed; jobs still retiring for the drain unretire."""
    out: Actions = []
    finish_draining(engine, now)
    for slot in engine.slots.values():
        if slot.state == S.DRAINED:
            engine._move(slot, "drain_cancelled", now, out)
        elif slot.state == S.CLAIMED and slot.retire_reason == "drain":
            # a graceful drain's retirement is reversible, like a RANK one (19)
            slot.retire_reason = slot.retirement_override = slot.vacate_cause = None
            if slot.activity == A.RETIRING:
                engine._move(slot, "unretire", now, out)
    return out + engine.evaluate(now)
