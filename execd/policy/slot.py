"""A slot's policy state: state/activity, timers, its claim, and the attributes it publishes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from execd.claims.ids import ClaimId
from execd.claims.lease import Lease
from execd.policy.states import Activity, State


@dataclass(frozen=True)
class Now:
    """Monotonic seconds for timers, wall seconds for published attributes."""

    mono: float
    wall: float


@dataclass
class Claim:
    id: ClaimId
    request_ad: Any  # classad2 ClassAd of the claiming job
    rank: float
    lease: Lease
    created: float  # monotonic
    jobs_run: int = 0
    accepted_while_draining: bool = False  # scavenged under a drain start expression
    # a preempting claim's basis: "rank" (a higher RANK) or "user_priority" (the
    # negotiator's, of an equal RANK); None for a claim of a free slot
    preempts_for: str | None = None


# the retire reason of a job retiring for a preempting claim: undone (19) if it goes away
FOR_PREEMPTING_CLAIM = "preempting_claim"


@dataclass
class Slot:
    name: str
    facts: dict[str, Any]
    state: State
    activity: Activity
    entered_state: float  # monotonic
    entered_activity: float
    entered_state_wall: float
    entered_activity_wall: float
    dynamic: bool = False
    parent: str | None = None
    claim: Claim | None = None
    preempting_claim: Claim | None = None  # a claim waiting to preempt this slot's
    job_ad: Any = None
    job_start: float | None = None  # monotonic
    job_start_wall: float | None = None
    suspended_since: float | None = None
    suspended_by_command: bool = False  # SUSPEND_CLAIM: CONTINUE does not wake it
    job_suspend_total: float = 0.0
    claim_run_total: float = 0.0
    claim_suspend_total: float = 0.0
    retire_reason: str | None = None  # "preempt", FOR_PREEMPTING_CLAIM, "shutdown", "drain"
    retirement_override: float | None = None  # peaceful = inf, fast = 0
    evict_reason: str | None = None
    # the latest cause given to retire or evict the job (condor_startd's setVacateReason:
    # each retire/kill/release overwrites it); its shadow is told this one's reason
    vacate_cause: str | None = None
    # condor_startd's BadputCausedByPreemption (its claim's flag, in the job's history
    # record): set by the policy only (evaluate.py, claiming.py: PREEMPT, a retirement's
    # end while not draining, KILL), never by a command's kill; cleared with the claim
    preemption_badput: bool = False
    vacate_deadline: float | None = None
    starter_running: bool = False
    starter_family_killed: bool = False
    backfill_running: bool = False  # this slot shares the daemon's backfill client
    backfill_leave_to: str | None = None  # "owner", "matched", "claimed"
    claimed_once: bool = False
    cpu_busy_since: float | None = None  # monotonic; None while CPUBusy is not true
    drain_mark: float | None = None  # monotonic; unclaimed time is counted up to here
    ad: Any = None  # the machine ad, rebuilt from facts when they change
    ad_policy_values: dict[str, Any] = field(default_factory=dict)  # as written into ad
    ad_keys: set[str] = field(default_factory=set)  # lower-cased attribute names in ad
    target_free: dict[str, bool] = field(default_factory=dict)  # see adcache.py
    logged_errors: set[tuple[str, str]] = field(default_factory=set)
    # seconds spent in each (state, activity) left so far: TotalTime<State><Activity>
    state_times: dict[tuple[State, Activity], float] = field(default_factory=dict)

    def leave_activity(self, now: float) -> None:
        """Count the time in the current state and activity, which the slot leaves now."""
        pair = (self.state, self.activity)
        self.state_times[pair] = self.state_times.get(pair, 0.0) + now - self.entered_activity

    def job_run_time(self, now: float) -> float:
        """Time since the job started, minus its suspensions (seed 000, transition 18)."""
        if self.job_start is None:
            return 0.0
        suspended = self.job_suspend_total
        if self.suspended_since is not None:
            suspended += now - self.suspended_since
        return max(0.0, now - self.job_start - suspended)


# The time spent in each state and activity, as condor_startd publishes it.
TOTAL_TIME_ATTRIBUTES = {
    (State.OWNER, Activity.IDLE): "TotalTimeOwnerIdle",
    (State.UNCLAIMED, Activity.IDLE): "TotalTimeUnclaimedIdle",
    (State.UNCLAIMED, Activity.BENCHMARKING): "TotalTimeUnclaimedBenchmarking",
    (State.MATCHED, Activity.IDLE): "TotalTimeMatchedIdle",
    (State.CLAIMED, Activity.IDLE): "TotalTimeClaimedIdle",
    (State.CLAIMED, Activity.BUSY): "TotalTimeClaimedBusy",
    (State.CLAIMED, Activity.SUSPENDED): "TotalTimeClaimedSuspended",
    (State.CLAIMED, Activity.RETIRING): "TotalTimeClaimedRetiring",
    (State.CLAIMED, Activity.CLEANING): "TotalTimeClaimedCleaning",
    (State.PREEMPTING, Activity.VACATING): "TotalTimePreemptingVacating",
    (State.PREEMPTING, Activity.KILLING): "TotalTimePreemptingKilling",
    (State.BACKFILL, Activity.IDLE): "TotalTimeBackfillIdle",
    (State.BACKFILL, Activity.BUSY): "TotalTimeBackfillBusy",
    (State.BACKFILL, Activity.KILLING): "TotalTimeBackfillKilling",
    (State.DRAINED, Activity.IDLE): "TotalTimeDrainedIdle",
    (State.DRAINED, Activity.RETIRING): "TotalTimeDrainedRetiring",
}

# Every attribute slot_policy_attributes (and the engine) may write into a slot's ad.
POLICY_ATTRIBUTES = frozenset(TOTAL_TIME_ATTRIBUTES.values()) | frozenset({
    "State", "Activity", "EnteredCurrentState", "EnteredCurrentActivity", "MyCurrentTime",
    "CurrentTime", "ClockMin", "ClockDay", "TotalJobRunTime", "TotalJobSuspendTime",
    "TotalClaimRunTime", "TotalClaimSuspendTime", "CpuBusy", "CpuBusyTime", "Start",
    "Requirements", "JobStart", "RemoteRank", "ClaimLeaseDuration", "AcceptedWhileDraining",
    "RetirementTimeRemaining",
})


def slot_policy_attributes(slot: Slot, now: Now, start_expr: Any = True) -> dict[str, Any]:
    """The timer/state attributes the engine owns, for the slot-ad builder to merge."""
    def wall(mono: float) -> int:
        return int(now.wall - (now.mono - mono))

    job_suspend = slot.job_suspend_total
    if slot.suspended_since is not None:
        job_suspend += now.mono - slot.suspended_since
    job_run = slot.job_run_time(now.mono)
    lies = slot.state in (State.MATCHED, State.PREEMPTING, State.DRAINED)
    attrs: dict[str, Any] = {
        "State": slot.state.value,
        "Activity": slot.activity.value,
        "EnteredCurrentState": int(slot.entered_state_wall),
        "EnteredCurrentActivity": int(slot.entered_activity_wall),
        "MyCurrentTime": int(now.wall),
        "ClockMin": int((now.wall % 86400) // 60),
        "ClockDay": int(((now.wall // 86400) + 4) % 7),  # 1970-01-01 was a Thursday
        "TotalJobRunTime": int(job_run),
        "TotalJobSuspendTime": int(job_suspend),
        "TotalClaimRunTime": int(slot.claim_run_total + job_run),
        "TotalClaimSuspendTime": int(slot.claim_suspend_total + job_suspend),
        "CpuBusy": slot.cpu_busy_since is not None,
        "CpuBusyTime": 0 if slot.cpu_busy_since is None else int(now.mono - slot.cpu_busy_since),
        # Requirements/Start are False while Matched, Preempting or Drained (seed 000).
        "Start": False if lies else start_expr,
        "Requirements": False if lies else start_expr,
        # as condor_startd: on every slot, true for a claim accepted while draining
        "AcceptedWhileDraining": slot.claim is not None and slot.claim.accepted_while_draining,
    }
    totals = dict(slot.state_times)  # the pairs left so far, and the current one
    current = (slot.state, slot.activity)
    totals[current] = totals.get(current, 0.0) + now.mono - slot.entered_activity
    for pair, total in totals.items():
        if int(total):  # as condor_startd: only the pairs the slot has spent time in
            attrs[TOTAL_TIME_ATTRIBUTES[pair]] = int(total)
    if slot.job_start is not None:
        attrs["JobStart"] = wall(slot.job_start)
    if slot.claim is not None:
        attrs["RemoteRank"] = slot.claim.rank
        if math.isfinite(slot.claim.lease.duration):
            attrs["ClaimLeaseDuration"] = int(slot.claim.lease.duration)
    return attrs
