"""Starter-enforced eviction (seed 002): STARTER_EVICT, STARTER_WANT_VACATE, STARTER_KILL.

Evaluated in the daemon from the starter's published measurements (DESIGN.md: the
starter stays free of classad2). The starter-constructed ad (MY) holds the measurements,
JobState, EnteredCurrentState, the slot's Memory and CurrentTime; the job ad is TARGET,
so unscoped names resolve in the measurements first, then the job ad. Pure: `now` is an
argument.

Defaults from the seed: STARTER_EVICT undefined -> false (no starter eviction);
STARTER_WANT_VACATE undefined -> true (soft first); STARTER_KILL undefined -> false
(let the graceful eviction run its course).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from execd import classads


class StarterAction(Enum):
    NONE = "none"
    VACATE = "vacate"  # soft kill: the job's KillSig
    KILL = "kill"  # hard kill: the whole cgroup


@dataclass(frozen=True)
class StarterPolicy:
    """The three expressions as configured; None where the knob is not set."""

    evict: str | None = None
    want_vacate: str | None = None
    kill: str | None = None


def _decide(expr: str | None, my: Any, job_ad: Any, default: bool) -> bool:
    if expr is None:
        return default
    value = classads.evaluate(expr, my, job_ad)
    if classads.is_undefined(value):
        return default
    return classads.is_true(value)


def starter_decision(
    policy: StarterPolicy,
    job_ad: Any,
    measurements: dict[str, Any],
    memory_mb: int,
    now: int,
) -> StarterAction:
    """What the starter's policy asks for, given the job's state in `measurements`.

    JobState is Running or Suspended (may evict) or Vacating (may escalate to kill).
    """
    attrs = dict(measurements)
    attrs["Memory"] = memory_mb
    attrs["CurrentTime"] = now
    my = classads.new_ad(attrs)
    state = measurements.get("JobState", "Running")
    if state == "Vacating":
        return StarterAction.KILL if _decide(policy.kill, my, job_ad, False) else StarterAction.NONE
    if state not in ("Running", "Suspended"):
        return StarterAction.NONE
    if not _decide(policy.evict, my, job_ad, False):
        return StarterAction.NONE
    if _decide(policy.want_vacate, my, job_ad, True):
        return StarterAction.VACATE
    return StarterAction.KILL
