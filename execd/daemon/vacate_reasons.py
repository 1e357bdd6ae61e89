"""What an evicted job's shadow is told about why (VacateReason, VacateReasonCode,
VacateReasonSubCode: its 004 event's words), by the policy engine's eviction reason, as
condor_startd 25.14.1 tells it (codes from condor_holdcodes.h; each compared in the
pool tier).

An eviction left out here gets no reason, and the shadow writes "Unspecified job
interruption" (1005): so does condor_startd 25.14.1's for RANK preemption
(test_pool_preemption), though its source names one. An expired claim lease has none
in condor_startd's source either.

The cause is the latest one given (the engine's Slot.vacate_cause), as condor_startd's
setVacateReason keeps the last: a job retiring for PREEMPT and then drained gracefully
is told "Startd was draining", not the PREEMPT reason.
"""

from __future__ import annotations

from execd.policy.slot import FOR_PREEMPTING_CLAIM

VacateReason = tuple[str, int, int]
SHUT_DOWN: VacateReason = ("Startd was shutdown", 1013, 0)
RELEASED: VacateReason = ("Schedd released the claim", 1017, 0)

VACATE_REASONS: dict[str, VacateReason | None] = {
    # a preempting claim made the job retire (RANK or user priority): none, as the
    # preemption's own eviction ("rank", "user_priority", left out)
    FOR_PREEMPTING_CLAIM: None,
    # condor_vacate, graceful or -fast (command.cpp: StartdVacateCommand)
    "vacate": ("Claim vacated by the administrator", 1010, 0),
    # condor_drain, graceful, quick or fast (ResMgr's releaseAllClaims: StartdDraining)
    "drain": ("Startd was draining", 1014, 0),
    # the PREEMPT expression (ResState's eval_policy: StartdPreemptExpression)
    "preempt": ("PREEMPT expression evaluated to True", 1011, 0),
    # the daemon's shutdown, graceful (SIGTERM, DC_OFF_GRACEFUL) or fast (SIGQUIT,
    # DC_OFF_FAST): main_shutdown_graceful's releaseAllClaims, _fast's killAllClaims
    "shutdown": SHUT_DOWN,
    # the schedd's RELEASE_CLAIM of a claim (command.cpp: kill_claim, StartdReleaseCommand);
    # it reaches no 004 (the schedd sends it when the job's shadow is gone), but the
    # run's STARTD_HISTORY record says it
    "released": RELEASED,
    # a p-slot taking back d-slots (ALLOW_PSLOT_PREEMPTION), whatever the basis:
    # condor_startd's kill_claim (StartdPreemptingClaimUserPrio)
    "pslot_preemption": ("Preempted for a Priority user", 1019, 0),
}


def vacate_reason(evict_reason: str | None) -> VacateReason | None:
    """The shadow's vacate reason for the engine's `evict_reason`; None: none is given."""
    return None if evict_reason is None else VACATE_REASONS.get(evict_reason)
