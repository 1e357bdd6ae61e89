"""What draining this machine now would cost: the ExpectedMachine*Draining* attributes.

condor_defrag ranks and picks machines to drain by these (its default DEFRAG_RANK is
-ExpectedMachineGracefulDrainingBadput), and condor_startd publishes them on every slot.
For each slot running a job, with its CPUs, the job's run time so far, its retirement
left and its vacate time (as the engine grants them):

- quick draining (condor_drain -fast/-quick): the job is vacated now; the work lost
  is cpus * (run time + vacate time), and the machine is empty after the longest
  vacate time;
- graceful draining: the job retires first; the work lost is cpus * (run time +
  what it still gets: its retirement left, or its vacate time if that is longer),
  and the machine is empty after the longest of those.

Completions are absolute (epoch seconds). A machine that runs no job is drained
already: its completion is the moment that was first seen, and stays so, unless a later
estimate was in the future (as condor_startd's ResMgr::compute_draining_attrs keeps it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from execd.policy.retirement import INT_MAX, retirement_left, vacate_time
from execd.policy.slot import Now

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine


@dataclass(frozen=True)
class DrainEstimate:
    graceful_badput: int = 0
    quick_badput: int = 0
    graceful_completion: int = 0  # epoch seconds; 0 until first estimated
    quick_completion: int = 0

    def attributes(self) -> dict[str, int]:
        return {
            "ExpectedMachineGracefulDrainingBadput": self.graceful_badput,
            "ExpectedMachineQuickDrainingBadput": self.quick_badput,
            "ExpectedMachineGracefulDrainingCompletion": self.graceful_completion,
            "ExpectedMachineQuickDrainingCompletion": self.quick_completion,
        }


def _cpus(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def estimate(engine: PolicyEngine, now: Now, previous: DrainEstimate) -> DrainEstimate:
    """The estimate over every slot of `engine` at `now`; `previous` the last one."""
    graceful_badput = quick_badput = 0.0
    graceful_after = quick_after = 0.0
    busy = False
    for slot in engine.slots.values():
        if slot.job_start is None:  # no job: nothing to lose, nothing to wait for
            continue
        busy = True
        cpus = _cpus(slot.facts.get("Cpus"))
        run = slot.job_run_time(now.mono)
        vacate = vacate_time(engine, slot, now)
        graceful = max(retirement_left(engine, slot, now), vacate)
        quick_badput += cpus * (run + vacate)
        graceful_badput += cpus * (run + graceful)
        graceful_after = max(graceful_after, graceful)
        quick_after = max(quick_after, vacate)
    wall = int(now.wall)
    if busy:
        return DrainEstimate(_capped(graceful_badput), _capped(quick_badput),
                             _capped(wall + graceful_after), _capped(wall + quick_after))
    return DrainEstimate(0, 0, _drained_since(previous.graceful_completion, wall),
                         _drained_since(previous.quick_completion, wall))


def _drained_since(previous: int, wall: int) -> int:
    """An idle machine's completion: when it was first seen drained (or now, if the last
    estimate was still in the future: it finished early)."""
    return wall if previous == 0 or previous > wall else previous


def _capped(value: float) -> int:
    """An endless retirement (a huge MAXJOBRETIREMENTTIME) stays a ClassAd integer."""
    return INT_MAX if value >= INT_MAX else int(value)
