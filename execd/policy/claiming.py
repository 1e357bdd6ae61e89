"""Claim events for one slot: match, claim, alive, activate, job/starter exit, release.

Functions over a :class:`PolicyEngine` (sans-IO like it); the engine's methods of the
same names delegate here. A claim's lifecycle (seed 000, 3.5.5): claimed (Claimed/Idle),
activated (Busy), the job ends (Cleaning, then Idle again: the claim is reused), and the
claim ends by release, eviction, lease expiry or CLAIM_WORKLIFE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from execd import classads
from execd.claims.ids import ClaimId
from execd.claims.lease import Lease, lease_duration
from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.evaluate import evaluate_slot, retirement_ended, retirement_over
from execd.policy.preempting import drop_preempting_claim
from execd.policy.slot import FOR_PREEMPTING_CLAIM, Claim, Now, Slot
from execd.policy.states import Activity, State, label

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine

S, A = State, Activity
Actions = list[act.Action]
RUNNING = (A.BUSY, A.SUSPENDED, A.RETIRING)  # a job runs (not yet Cleaning)


def as_ad(ad: Any) -> Any:
    return classads.new_ad(ad) if isinstance(ad, dict) else ad


def match(engine: PolicyEngine, slot: Slot, now: Now) -> Actions:
    out: Actions = []
    if slot.state == S.BACKFILL:
        slot.backfill_leave_to = "matched"
        out += engine._leave_backfill(slot, now)
    else:
        engine._move(slot, "match", now, out)
    return out


def request_claim(engine: PolicyEngine, slot: Slot, claim_id: ClaimId, request_ad: Any,
                  now: Now, *, alive_interval: float | None,
                  user_priority: bool = False) -> tuple[bool, Actions]:
    """A claim for ``slot``; on a claimed slot a preempting one. ``user_priority``: the
    negotiator sent it (the slot's preempting claim id), which condor_startd accepts for
    a RANK no lower than the current claim's (an equal one: preemption for the
    submitter's user priority); any other claim must rank the job higher."""
    out: Actions = []
    if engine.draining and not engine.scavenging:  # not even on a freshly carved d-slot
        out.append(act.LogEvent("claim_refused", {"slot": slot.name, "why": "draining"}))
        return False, out
    job = as_ad(request_ad)
    my = engine.machine_ad(slot, now)
    if not engine._true(slot, "START", my, job, out):
        out.append(act.LogEvent("claim_refused", {"slot": slot.name, "why": "START is not true"}))
        return False, out
    rank = engine._number(slot, "RANK", my, job, out) or 0.0
    cfg = engine.config
    alive = cfg.number("ALIVE_INTERVAL") if alive_interval is None else alive_interval
    jld = classads.to_number(job.get("JobLeaseDuration"))
    lease = Lease(lease_duration(jld, alive, cfg.number("MAX_CLAIM_ALIVES_MISSED")), now.mono)
    claim = Claim(claim_id, job, rank, lease, now.mono,
                  accepted_while_draining=engine.draining)
    if slot.state in (S.UNCLAIMED, S.MATCHED) or (slot.dynamic and slot.state == S.OWNER):
        trigger = "dslot_claimed" if slot.state == S.OWNER else "claim"
        slot.claim, slot.claimed_once = claim, True
        engine._move(slot, trigger, now, out)
        return True, out
    if slot.state == S.BACKFILL:
        slot.preempting_claim = claim
        slot.backfill_leave_to = "claimed"
        return True, out + engine._leave_backfill(slot, now)
    basis = _preemption_basis(slot, rank, user_priority)
    pending = slot.preempting_claim
    # condor_startd's preempting preempting claim (r_pre_pre): the negotiator may match
    # a claimed slot again while a preempting claim waits (its job retiring); a claim
    # ranked no lower than the waiting one takes its place
    replaces = pending is not None and user_priority and rank >= pending.rank
    if slot.state == S.CLAIMED and basis is not None and (pending is None or replaces) \
            and not engine.draining and engine.shutting_down is None:
        claim.preempts_for = basis
        drop_preempting_claim(slot, "replaced by a new preempting claim", out, "replaced")
        slot.preempting_claim = claim
        out.append(act.LogEvent("preempting_claim", {
            "slot": slot.name, "basis": basis,
            "why": f"preempting claim based on {PREEMPTION_BASES[basis]}"}))
        if pending is None and slot.activity in (A.IDLE, A.BUSY, A.SUSPENDED):
            _preempt_for_claim(engine, slot, basis, now, out)
        out += evaluate_slot(engine, slot, now)
        return True, out
    why = f"slot is {slot.state.value}"
    if slot.state == S.CLAIMED and slot.claim is not None and basis is None:
        needed = "no lower than" if user_priority else "higher than"
        why += f" (a preempting claim needs a RANK {needed} the claim's " \
            f"{slot.claim.rank:g}, not {rank:g})"
    elif slot.state == S.CLAIMED and pending is not None:
        why += f" (a preempting claim of RANK {pending.rank:g} waits)"
    out.append(act.LogEvent("claim_refused", {"slot": slot.name, "why": why}))
    return False, out


# why a preempting claim was accepted, in condor_startd's words ("State change:
# preempting claim based on ..."); the counter each adds to is JobRankPreemptions or
# JobUserPrioPreemptions
PREEMPTION_BASES = {"rank": "machine rank", "user_priority": "user priority"}


def _preemption_basis(slot: Slot, rank: float, user_priority: bool) -> str | None:
    """What a claim of ``rank`` on the claimed slot would preempt for, or None (refused).
    condor_startd (command.cpp request_claim): a higher RANK preempts for rank; the
    negotiator's preempting claim of an equal RANK for user priority; fetched work (and
    execd's own control socket) only for a higher RANK."""
    if slot.claim is None:
        return None
    if rank > slot.claim.rank:
        return "rank"
    if user_priority and rank == slot.claim.rank:
        return "user_priority"
    return None


def _preempt_for_claim(engine: PolicyEngine, slot: Slot, basis: str, now: Now,
                       out: Actions) -> None:
    """A preempting claim arrived (for rank or user priority: the same path), as
    condor_startd 25 evaluates it: with no retirement left (MaxJobRetirementTime 0, or
    no more than the vacate time; an idle claim has none) the slot goes straight to
    Preempting (10, p1, 17); else a busy job retires (13, undone by 19 if the claim goes
    away) and a suspended one stays suspended, to retire when it continues (16)."""
    if slot.activity != A.IDLE:
        slot.retire_reason = slot.retire_reason or FOR_PREEMPTING_CLAIM
        slot.vacate_cause = FOR_PREEMPTING_CLAIM  # the latest cause (no reason told)
    if slot.activity == A.IDLE or retirement_over(engine, slot, now):
        if slot.activity in RUNNING:  # condor_startd retires it; the retirement is over
            retirement_ended(engine, slot)
        engine._evict(slot, now, out, basis)
    elif slot.activity == A.BUSY:
        engine._move(slot, "retire", now, out)


def carve_refusal(engine: PolicyEngine, pslot: Slot, request_ad: Any, now: Now
                  ) -> tuple[str | None, Actions]:
    """Why a claim may not carve a d-slot from partitionable slot ``pslot`` (None: it may).

    The p-slot is what was matched: it must be accepting claims (Unclaimed, or Matched
    to this request) and its START true for the request. A p-slot in Owner, Backfill,
    Drained or Preempting carves nothing.
    """
    out: Actions = []
    if pslot.state not in (S.UNCLAIMED, S.MATCHED):
        return f"{pslot.name} is {label(pslot.state, pslot.activity)}", out
    my = engine.machine_ad(pslot, now)
    if not engine._true(pslot, "START", my, as_ad(request_ad), out):
        return f"{pslot.name}: START is not true", out
    return None, out


def abort_claim(engine: PolicyEngine, slot: Slot, now: Now) -> Actions:
    """A claim request refused without an answer (a p-slot's REQUEST_CLAIM naming d-slots
    it cannot preempt), as condor_startd's abort_claim: a slot not claimed goes to Owner
    ("claiming protocol failed") and, IS_OWNER false, on to Unclaimed at once (its
    enter_action), which publishes its ad again; a claimed one stays as it is."""
    out: Actions = []
    if (slot.state, slot.activity) not in ((S.UNCLAIMED, A.IDLE), (S.MATCHED, A.IDLE)):
        return out
    engine._move(slot, "claim_aborted", now, out)
    if not engine._true(slot, "IS_OWNER", engine.machine_ad(slot, now), None, out):
        engine._move(slot, "is_owner_false", now, out)
    return out


def alive(slot: Slot, now: Now, claim_id: ClaimId | None) -> None:
    """A keep-alive renews the claim it names (every claim on the slot when none is named)."""
    for claim in (slot.claim, slot.preempting_claim):
        if claim is not None and (claim_id is None or claim.id == claim_id):
            claim.lease.renew(now.mono)


def activate(engine: PolicyEngine, slot: Slot, job_ad: Any, now: Now) -> tuple[bool, Actions]:
    out: Actions = []
    job = as_ad(job_ad)
    if slot.state != S.CLAIMED or slot.activity != A.IDLE or slot.claim is None:
        raise PolicyError(f"cannot activate {slot.name} in {label(slot.state, slot.activity)}")
    worklife = engine._number(slot, "CLAIM_WORKLIFE", engine.machine_ad(slot, now), job, out)
    if worklife is not None and worklife >= 0 and slot.claim.jobs_run > 0 \
            and now.mono - slot.claim.created > worklife:
        out.append(act.LogEvent("activation_refused", {"slot": slot.name,
                                                       "why": "CLAIM_WORKLIFE"}))
        return False, out
    if not engine._true(slot, "START", engine.machine_ad(slot, now), job, out):
        out.append(act.LogEvent("activation_refused", {"slot": slot.name,
                                                       "why": "START is not true"}))
        return False, out
    slot.job_ad, slot.job_start, slot.job_start_wall = job, now.mono, now.wall
    slot.job_suspend_total, slot.suspended_since = 0.0, None
    slot.claim.jobs_run += 1
    slot.starter_running = True
    engine._move(slot, "activate", now, out)
    out.append(act.SpawnStarter(slot.name, str(slot.claim.id)))
    return True, out


def job_exited(engine: PolicyEngine, slot: Slot, now: Now) -> Actions:
    """The job ended; its starter is still cleaning up: Busy/Retiring -> Claimed/Cleaning."""
    out: Actions = []
    if slot.state != S.CLAIMED or slot.activity not in (A.BUSY, A.RETIRING, A.SUSPENDED):
        raise PolicyError(f"job exited on {slot.name} in {label(slot.state, slot.activity)}")
    engine._end_job(slot, now)
    if slot.activity == A.SUSPENDED:  # a suspended job can only end by being killed
        slot.leave_activity(now.mono)
        slot.activity, slot.entered_activity = A.BUSY, now.mono
    engine._move(slot, "job_exited", now, out)
    return out


def starter_exited(engine: PolicyEngine, slot: Slot, now: Now) -> Actions:
    """The starter is gone: the job ended normally (through Cleaning) or was evicted."""
    out: Actions = []
    if slot.state == S.CLAIMED and slot.activity not in (A.CLEANING, A.IDLE):
        out += job_exited(engine, slot, now)  # the job's end was not reported on its own
    slot.starter_running = False
    engine._end_job(slot, now)
    if slot.state == S.CLAIMED and slot.activity == A.CLEANING:
        reason = slot.retire_reason if slot.retire_reason != FOR_PREEMPTING_CLAIM else None
        pending = slot.preempting_claim
        if pending is not None:  # condor_startd: straight to Preempting (c2)
            engine._evict(slot, now, out, reason or pending.preempts_for or "rank",
                          retirement_end=reason is not None)
        else:
            engine._move(slot, "starter_exited", now, out)
            if reason is not None:
                engine._evict(slot, now, out, reason, retirement_end=True)
    elif slot.state == S.PREEMPTING:
        engine._finish_preempting(slot, now, out)
    else:
        raise PolicyError(f"starter exited on {slot.name} in {label(slot.state, slot.activity)}")
    engine._check_scavenging(now, out)
    return out + evaluate_slot(engine, slot, now)


def release(engine: PolicyEngine, slot: Slot, now: Now, claim_id: ClaimId | None) -> Actions:
    """RELEASE_CLAIM: of the slot's claim, or of a preempting claim still waiting (19)."""
    pending = slot.preempting_claim
    if claim_id is not None and pending is not None and pending.id == claim_id:
        return withdraw_preempting_claim(engine, slot, now)
    if claim_id is not None and (slot.claim is None or slot.claim.id != claim_id):
        raise PolicyError(f"claim {claim_id} does not hold {slot.name}")
    if slot.state != S.CLAIMED:
        raise PolicyError(f"cannot release {slot.name} in {label(slot.state, slot.activity)}")
    out: Actions = []
    engine._evict(slot, now, out, "released", kill=True)
    return out


def withdraw_preempting_claim(engine: PolicyEngine, slot: Slot, now: Now,
                              why: str = "released") -> Actions:
    """The preempting claim went away before it got the slot: retirement is undone (19)."""
    if slot.preempting_claim is None:
        raise PolicyError(f"no preempting claim waits on {slot.name}")
    out: Actions = []
    drop_preempting_claim(slot, why, out)
    if slot.state == S.BACKFILL and slot.backfill_leave_to == "claimed":
        slot.backfill_leave_to = "owner"
    return out + evaluate_slot(engine, slot, now)


def deactivate(engine: PolicyEngine, slot: Slot, now: Now, fast: bool) -> Actions:
    """Stop the job, keep the claim: the starter's exit then leaves Claimed/Idle (reuse);
    unlike release or vacate, which end the claim through Preempting."""
    if slot.state != S.CLAIMED or not slot.starter_running:
        raise PolicyError(f"nothing to deactivate on {slot.name} in "
                          f"{label(slot.state, slot.activity)}")
    out: Actions = [act.LogEvent("claim_deactivated", {"slot": slot.name, "fast": fast})]
    engine._resume(slot, now, out)  # a suspended job must run to take its signal
    out.append(act.HardKill(slot.name) if fast else act.SoftKill(slot.name))
    return out


def vacate(engine: PolicyEngine, slot: Slot, now: Now, fast: bool,
           resumed: bool = False) -> Actions:
    """condor_vacate, as condor_startd's vacate_all: fast kills the claim (hard kill);
    graceful retires it for good (retire_claim: the job keeps its retirement time, no
    unretiring), and the soft kill comes once retirement is over. `resumed`: an eviction
    a restarted daemon goes on with; its retirement and its preemption's badput were
    decided before the restart (the daemon keeps the flag), so it is evicted now and
    retirement_ended does not decide the flag again."""
    out: Actions = []
    if slot.state == S.CLAIMED:
        if not fast and not resumed and slot.activity in RUNNING \
                and not retirement_over(engine, slot, now):
            engine._retire(slot, "vacate", now, out)
        else:
            if not fast and not resumed and slot.activity in RUNNING:  # retirement over
                retirement_ended(engine, slot)
            engine._evict(slot, now, out, "vacate", kill=fast, retire=not fast)
    elif slot.state == S.BACKFILL:
        slot.backfill_leave_to = "owner"
        out += engine._leave_backfill(slot, now)
    return out
