"""Claim-holder commands beyond claim/activate/release, and rebuilding state after a restart.

Sans-IO like the engine: each function takes the engine, a slot name and ``now`` and
returns actions. Suspend/continue are HTCondor's SUSPEND_CLAIM/CONTINUE_CLAIM (14/15,
and 20/16 while retiring): a slot suspended by its claim holder stays suspended until
the holder continues it or the claim ends; the CONTINUE expression does not wake it.
Deactivate ends the job but keeps the claim (DEACTIVATE_CLAIM: soft kill;
..._FORCEFULLY: hard kill); the slot goes Claimed/Idle when the starter exits (12).
Kill ends a claim at once (condor_startd's kill_claim, as a p-slot taking back the
d-slots a negotiator's ALLOW_PSLOT_PREEMPTION match preempts).

Restoring is not a transition: a new daemon puts a slot back in the state the old one
left it in (Claimed/Idle, or Claimed/Busy with a starter running), from the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from execd import classads
from execd.claims.ids import ClaimId
from execd.claims.lease import Lease
from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.preempting import drop_preempting_claim
from execd.policy.slot import Claim, Now, Slot
from execd.policy.states import Activity, State, label

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine

S, A = State, Activity
Actions = list[act.Action]


def _running(slot: Slot, verb: str) -> None:
    if slot.state != S.CLAIMED or not slot.starter_running:
        raise PolicyError(f"cannot {verb} {slot.name} in {label(slot.state, slot.activity)}: "
                          "no job runs on its claim")


def suspend_claim(engine: PolicyEngine, name: str, now: Now) -> Actions:
    slot = engine.slot(name)
    _running(slot, "suspend")
    out: Actions = []
    if slot.activity == A.SUSPENDED:
        slot.suspended_by_command = True
        return out  # already suspended (by policy): now the holder owns the suspension
    if slot.activity not in (A.BUSY, A.RETIRING):
        raise PolicyError(f"cannot suspend {name} in {label(slot.state, slot.activity)}")
    engine._suspend(slot, now, out)
    slot.suspended_by_command = True
    return out


def continue_claim(engine: PolicyEngine, name: str, now: Now) -> Actions:
    slot = engine.slot(name)
    _running(slot, "continue")
    out: Actions = []
    if slot.activity != A.SUSPENDED:
        raise PolicyError(f"cannot continue {name} in {label(slot.state, slot.activity)}: "
                          "it is not suspended")
    trigger = "continue" if slot.retire_reason is None else "continue_retiring"
    engine._move(slot, trigger, now, out)
    engine._resume(slot, now, out)
    slot.suspended_by_command = False
    return out


def deactivate(engine: PolicyEngine, name: str, now: Now, *, forceful: bool = False) -> Actions:
    """End the job, keep the claim: Claimed/Idle again once the starter has exited."""
    slot = engine.slot(name)
    _running(slot, "deactivate")
    out: Actions = []
    if slot.activity == A.SUSPENDED:
        trigger = "continue" if slot.retire_reason is None else "continue_retiring"
        engine._move(slot, trigger, now, out)
        engine._resume(slot, now, out)
        slot.suspended_by_command = False
    out.append(act.HardKill(name) if forceful else act.SoftKill(name))
    out.append(act.LogEvent("claim_deactivated", {"slot": name, "forceful": forceful}))
    return out


def kill_claim(engine: PolicyEngine, name: str, now: Now, reason: str) -> Actions:
    """condor_startd's kill_claim: the claim ends at once, whatever retirement its job has
    left: Claimed/* -> Preempting/Killing with a hard kill (or at once without a job),
    and the slot is not handed to a preempting claim waiting on it (that claim goes)."""
    slot = engine.slot(name)
    if slot.state != S.CLAIMED:
        raise PolicyError(f"cannot kill the claim of {name} in "
                          f"{label(slot.state, slot.activity)}: it is not Claimed")
    out: Actions = []
    drop_preempting_claim(slot, reason, out)
    engine._evict(slot, now, out, reason, kill=True)
    return out


def _restore_state(slot: Slot, state: State, activity: Activity, now: Now, out: Actions) -> None:
    old = label(slot.state, slot.activity)
    slot.state, slot.activity = state, activity
    slot.entered_state = slot.entered_activity = now.mono
    slot.entered_state_wall = slot.entered_activity_wall = now.wall
    out.append(act.LogEvent("slot_restored", {
        "slot": slot.name, "old": old, "new": label(state, activity)}))
    out.append(act.PublishAd(slot.name))


def restore_claim(engine: PolicyEngine, name: str, claim_id: ClaimId, request_ad: Any,
                  now: Now, *, lease_duration: float, renewed_wall: float) -> Actions:
    """Claimed/Idle with the claim the old daemon granted. Its lease runs on from its
    last renewal (`renewed_wall`, wall time): the outage counts, as if the old daemon had
    kept running; a lease that ran out meanwhile expires at the next evaluation."""
    slot = engine.slot(name)
    out: Actions = []
    job = classads.new_ad(request_ad) if isinstance(request_ad, dict) else request_ad
    rank = engine._number(slot, "RANK", engine.machine_ad(slot, now), job, out) or 0.0
    since = min(max(0.0, now.wall - renewed_wall), lease_duration)  # a clock step: clamped
    slot.claim = Claim(claim_id, job, rank, Lease(lease_duration, now.mono - since), now.mono)
    slot.claimed_once = True
    _restore_state(slot, S.CLAIMED, A.IDLE, now, out)
    return out


def restore_job(engine: PolicyEngine, name: str, job_ad: Any, now: Now, *,
                started_wall: float, suspended_by: str | None = None) -> Actions:
    """Claimed/Busy with a starter running since ``started_wall`` (Claimed/Suspended if
    `suspended_by` the "policy" or a "command": a command's suspension outlives CONTINUE)."""
    slot = engine.slot(name)
    if slot.state != S.CLAIMED or slot.claim is None:
        raise PolicyError(f"cannot restore a job on {name} in {label(slot.state, slot.activity)}")
    out: Actions = []
    slot.job_ad = classads.new_ad(job_ad) if isinstance(job_ad, dict) else job_ad
    slot.job_start = now.mono - max(0.0, now.wall - started_wall)
    slot.job_start_wall = started_wall
    slot.job_suspend_total, slot.suspended_since = 0.0, None
    slot.claim.jobs_run += 1
    slot.starter_running = True
    if suspended_by is not None:
        slot.suspended_since = now.mono
        slot.suspended_by_command = suspended_by == "command"
    _restore_state(slot, S.CLAIMED, A.BUSY if suspended_by is None else A.SUSPENDED, now, out)
    return out
