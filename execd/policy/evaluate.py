"""The periodic policy pass for one slot: which expression moves it, per (state, activity)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from execd.policy import actions as act
from execd.policy.backfill import evaluate_backfill
from execd.policy.drain import account_unclaimed, drain_done, finish_draining
from execd.policy.retirement import retirement_left, vacate_time
from execd.policy.slot import FOR_PREEMPTING_CLAIM, Now, Slot
from execd.policy.states import Activity, State

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine

S, A = State, Activity
Actions = list[act.Action]


def evaluate_slot(engine: PolicyEngine, slot: Slot, now: Now) -> Actions:
    out: Actions = []
    if slot.drain_mark is not None:
        account_unclaimed(engine, slot, now)
    _cpu_busy(engine, slot, now, out)
    # A few moves chain in one pass (Owner -> Unclaimed -> Backfill; a drain that
    # resumes on completion: Owner -> Unclaimed -> Drained -> Owner -> Unclaimed); bound it.
    for _ in range(6):
        before = (slot.state, slot.activity)
        _step(engine, slot, now, out)
        # Claimed activities move at most once a pass: a suspend is not undone at once.
        if (slot.state, slot.activity) == before or slot.state == S.CLAIMED:
            break
    return out


def _step(engine: PolicyEngine, slot: Slot, now: Now, out: Actions) -> None:
    cfg = engine.config
    state, activity = slot.state, slot.activity
    # condor_startd enters Owner only to leave it for Unclaimed at once when IS_OWNER is
    # false (ResState::enter_action), before a drain is looked at (Unclaimed -> Drained)
    draining = engine.draining and not engine.scavenging and not slot.dynamic
    if state == S.OWNER and not slot.dynamic:
        my = engine.machine_ad(slot, now)
        if not engine._true(slot, "IS_OWNER", my, None, out):
            engine._move(slot, "is_owner_false", now, out)
            return
    if draining and activity == A.IDLE and state in (S.OWNER, S.UNCLAIMED):
        engine._move(slot, "drain", now, out)
        return
    if state == S.OWNER:
        if slot.dynamic and slot.claimed_once:  # its claim ended: Unclaimed -> deleted
            engine._move(slot, "is_owner_false", now, out)
        return
    if state == S.UNCLAIMED and activity == A.IDLE:
        my = engine.machine_ad(slot, now)
        if slot.dynamic:
            out.append(act.DeleteDynamicSlot(slot.name))
            del engine.slots[slot.name]
            return
        if engine._true(slot, "IS_OWNER", my, None, out):
            engine._move(slot, "is_owner_true", now, out)
        elif engine._true(slot, "RUNBENCHMARKS", my, None, out):
            engine._move(slot, "run_benchmarks", now, out)
            out.append(act.RunBenchmarks(slot.name))
        elif cfg.backfill_enabled and engine.shutting_down is None \
                and engine._true(slot, "START_BACKFILL", my, None, out):
            engine._move(slot, "start_backfill", now, out)
        return
    if state == S.MATCHED:
        my = engine.machine_ad(slot, now)
        if now.mono - slot.entered_state >= cfg.number("MATCH_TIMEOUT"):
            engine._move(slot, "match_timeout", now, out)
        elif engine._eval(slot, "START", my, None, out) is False:
            engine._move(slot, "start_false", now, out)
        return
    if state == S.CLAIMED:
        _claimed(engine, slot, now, out)
        return
    if state == S.PREEMPTING:
        _preempting(engine, slot, now, out)
        return
    if state == S.BACKFILL:
        evaluate_backfill(engine, slot, now, out)
        return
    if state == S.DRAINED and activity == A.RETIRING and drain_done(engine, slot):
        engine._move(slot, "drain_complete", now, out)
    elif state == S.DRAINED and activity == A.IDLE and engine.drain_resume:
        finish_draining(engine, now)  # resume on completion: every drained slot (34)
        for other in list(engine.slots.values()):
            if other.state == S.DRAINED and other.activity == A.RETIRING:
                engine._move(other, "drain_complete", now, out)
            if other.state == S.DRAINED:
                engine._move(other, "drain_finished", now, out)


def _claimed(engine: PolicyEngine, slot: Slot, now: Now, out: Actions) -> None:
    claim = slot.claim
    assert claim is not None
    if claim.lease.expired(now.mono):
        out.append(act.LogEvent("claim_lease_expired", {"slot": slot.name}))
        engine._evict(slot, now, out, "lease expired", kill=True)
        return
    # A waiting preempting claim has no lease running (condor_startd starts it when the
    # claim takes the slot): it waits out the retirement, however long.
    if slot.retire_reason == FOR_PREEMPTING_CLAIM and slot.preempting_claim is None \
            and slot.activity == A.SUSPENDED:
        slot.retire_reason = None  # the claim it would retire for went away (not 16 but 15)
    if slot.activity == A.CLEANING:
        return  # the starter is cleaning up after the job; its exit moves the slot
    my = engine.machine_ad(slot, now)
    job = slot.job_ad
    if slot.activity == A.IDLE:
        worklife = engine._number(slot, "CLAIM_WORKLIFE", my, claim.request_ad, out)
        # START "locally" false (seed 000, 10), read with the claim's own request as
        # TARGET: a drain start expression like TARGET.X =?= True is false without a job
        if engine._eval(slot, "START", my, claim.request_ad, out) is False:
            engine._evict(slot, now, out, "START is false")
        elif worklife is not None and worklife >= 0 and claim.jobs_run > 0 \
                and now.mono - claim.created > worklife:
            engine._evict(slot, now, out, "CLAIM_WORKLIFE")
        return
    if slot.activity in (A.BUSY, A.RETIRING) and engine._true(
            slot, "WANT_SUSPEND", my, job, out) and engine._true(slot, "SUSPEND", my, job, out):
        engine._suspend(slot, now, out)
        return
    if slot.activity == A.BUSY:
        if not engine._true(slot, "WANT_SUSPEND", my, job, out) \
                and engine._true(slot, "PREEMPT", my, job, out):
            slot.preemption_badput = True  # condor_startd's xa_preempt_and_retire
            engine._retire(slot, "preempt", now, out)
        else:
            return
    if slot.activity == A.SUSPENDED:
        if slot.retire_reason is not None and retirement_over(engine, slot, now):
            retirement_ended(engine, slot)
            engine._evict(slot, now, out, slot.retire_reason, retirement_end=True)
        elif not slot.suspended_by_command and engine._true(slot, "CONTINUE", my, job, out):
            trigger = "continue" if slot.retire_reason is None else "continue_retiring"
            engine._move(slot, trigger, now, out)
            engine._resume(slot, now, out)
        elif slot.retire_reason in (None, FOR_PREEMPTING_CLAIM) \
                and engine._true(slot, "PREEMPT", my, job, out):
            slot.preemption_badput = True
            engine._retire(slot, "preempt", now, out)  # then, as from Busy, maybe evict
        else:
            return
    if slot.activity == A.RETIRING:
        if slot.retire_reason == FOR_PREEMPTING_CLAIM and slot.preempting_claim is None:
            slot.retire_reason = slot.vacate_cause = None
            engine._move(slot, "unretire", now, out)
        elif retirement_over(engine, slot, now):
            retirement_ended(engine, slot)
            engine._evict(slot, now, out, slot.retire_reason or "retirement over",
                          retirement_end=True)


def retirement_ended(engine: PolicyEngine, slot: Slot) -> None:
    """A running job's retirement is over (condor_startd's xa_retirement_expired: the
    claim retired by condor_vacate, a preempting claim, PREEMPT or a graceful shutdown):
    a preemption's badput unless the machine is draining (then the drain's: the daemon
    records that)."""
    if not engine.draining:
        slot.preemption_badput = True


def retirement_over(engine: PolicyEngine, slot: Slot, now: Now) -> bool:
    """Evict when what is left of retirement no longer exceeds the vacate time (seed 000)."""
    left = retirement_left(engine, slot, now)
    return left <= 0 or (left <= vacate_time(engine, slot, now) and left != float("inf"))


def _preempting(engine: PolicyEngine, slot: Slot, now: Now, out: Actions) -> None:
    if slot.activity == A.VACATING:
        my = engine.machine_ad(slot, now)
        if engine._true(slot, "KILL", my, slot.job_ad, out):
            slot.preemption_badput = True  # condor_startd's xa_killing_time
            engine._move(slot, "kill", now, out)
            out.append(act.HardKill(slot.name))
        elif slot.vacate_deadline is not None and now.mono >= slot.vacate_deadline \
                and not slot.starter_family_killed:
            # HTCondor 25: a fast shutdown of the starter, without showing Killing.
            slot.starter_family_killed = True
            out.append(act.HardKill(slot.name))
        return
    if now.mono - slot.entered_activity >= engine.config.number("KILLING_TIMEOUT") \
            and not slot.starter_family_killed:
        slot.starter_family_killed = True
        out.append(act.KillStarterFamily(slot.name))


def _cpu_busy(engine: PolicyEngine, slot: Slot, now: Now, out: Actions) -> None:
    """CpuBusyTime: seconds CPUBusy has been true, 0 otherwise (seed 000, 3.5.3)."""
    busy = engine.config.constant("CPUBusy")
    if busy is None:
        busy = engine._true(slot, "CPUBusy", engine.machine_ad(slot, now), None, out)
    if not busy:
        slot.cpu_busy_since = None
    elif slot.cpu_busy_since is None:
        slot.cpu_busy_since = now.mono
