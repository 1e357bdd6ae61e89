"""How long a running job may go on once it is to be evicted: its retirement and its
vacate time, as the engine grants them (sans-IO: the slot, the engine's expressions and
``now``).

MAXJOBRETIREMENTTIME is the machine's retirement, which the job's MaxJobRetirementTime
may lower, never raise (a shutdown or drain may override it: Slot.retirement_override).
MachineMaxVacateTime is the time a vacated job gets between the soft kill and the hard
one; the job's JobMaxVacateTime lowers it, or raises it with retirement time it has left.
RetirementTimeRemaining is what the startd publishes of the retirement left.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from execd import classads
from execd.policy import actions as act
from execd.policy.slot import Now, Slot

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine

INT_MAX = 2**31 - 1  # HTCondor's endless retirement (a C int)


def vacate_time(engine: PolicyEngine, slot: Slot, now: Now) -> float:
    """MachineMaxVacateTime, lowered by JobMaxVacateTime, or raised out of retirement."""
    out: list[act.Action] = []
    machine = engine._number(slot, "MachineMaxVacateTime", engine.machine_ad(slot, now),
                             slot.job_ad, out) or 0.0  # fmt: skip
    job = None if slot.job_ad is None else classads.to_number(
        classads.evaluate(slot.job_ad.lookup("JobMaxVacateTime"), slot.job_ad)) \
        if "JobMaxVacateTime" in slot.job_ad else None
    if job is None:
        return machine
    if job <= machine:
        return job
    return max(machine, min(job, retirement_left(engine, slot, now)))


def retirement_time(engine: PolicyEngine, slot: Slot, now: Now) -> float:
    """MAXJOBRETIREMENTTIME; the job may lower it, never raise it."""
    if slot.retirement_override is not None:
        return slot.retirement_override
    out: list[act.Action] = []
    machine = engine._number(slot, "MAXJOBRETIREMENTTIME", engine.machine_ad(slot, now),
                             slot.job_ad, out) or 0.0  # fmt: skip
    if slot.job_ad is not None and "MaxJobRetirementTime" in slot.job_ad:
        job = classads.to_number(classads.evaluate(
            slot.job_ad.lookup("MaxJobRetirementTime"), slot.job_ad,
            engine.machine_ad(slot, now, full=True)))
        if job is not None:
            return min(machine, job)
    return machine


def retirement_remaining(engine: PolicyEngine, slot: Slot, now: Now) -> int:
    """RetirementTimeRemaining as the startd publishes it: the seconds of retirement
    the running job has left (HTCondor's INT_MAX less its age where retirement is
    endless), 0 without a job."""
    if slot.job_start is None:
        return 0
    left = retirement_left(engine, slot, now)
    if math.isinf(left):
        return max(0, INT_MAX - int(slot.job_run_time(now.mono)))
    return int(left)


def retirement_left(engine: PolicyEngine, slot: Slot, now: Now) -> float:
    total = retirement_time(engine, slot, now)
    if math.isinf(total):
        return total
    return max(0.0, total - slot.job_run_time(now.mono))
