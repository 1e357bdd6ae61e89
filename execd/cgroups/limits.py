"""Which limits a job's slice gets, and who enforces each one: the kernel or execd.

HTCondor's knobs (seed 003, "Limiting Resource Usage Using Cgroups"):
CGROUP_MEMORY_LIMIT_POLICY hard|soft|none|custom (custom: CGROUP_HARD_MEMORY_LIMIT_EXPR
gives the hard limit in MB), CGROUP_LOW_MEMORY_LIMIT (MB), DISABLE_SWAP_FOR_JOB; plus
ours: pids.max and cpu.max. Where a controller is missing the same limit is enforced by
policy from measured usage, and the plan says so.
"""

from __future__ import annotations

from typing import NamedTuple

from execd.errors import CgroupError

MB = 1024 * 1024
CPU_MAX_PERIOD_USEC = 100_000
POLICIES = ("hard", "soft", "none", "custom")


class LimitSettings(NamedTuple):
    """The slot's resources and the limit knobs, as the daemon resolved them."""

    memory_mb: int
    cpus: float
    memory_policy: str = "hard"
    custom_hard_memory_mb: int | None = None
    low_memory_mb: int | None = None
    disable_swap: bool = False
    pids_max: int | None = None
    cpu_max_cpus: float | None = None


class LimitPlan:
    """Files to write on the slice, and a plain statement of who enforces what."""

    def __init__(self) -> None:
        self.writes: dict[str, str] = {}
        self.kernel: list[str] = []
        self.policy: list[str] = []
        self.unenforced: list[str] = []
        # The memory limit in MB the starter must enforce itself (no memory controller).
        self.policy_memory_mb: int | None = None

    def describe(self) -> str:
        """One line for the log and the slot ad (CgroupEnforcement)."""
        parts = [
            "kernel: " + (", ".join(self.kernel) or "none"),
            "policy: " + (", ".join(self.policy) or "none"),
        ]
        if self.unenforced:
            parts.append("unenforced: " + ", ".join(self.unenforced))
        return "; ".join(parts)


def hard_memory_mb(s: LimitSettings) -> int | None:
    if s.memory_policy not in POLICIES:
        raise CgroupError(
            f"CGROUP_MEMORY_LIMIT_POLICY is {s.memory_policy!r}; expected one of {POLICIES}"
        )
    if s.memory_policy == "hard":
        return s.memory_mb if s.memory_mb > 0 else None  # 0: the slot has no memory limit
    if s.memory_policy == "custom":
        return s.custom_hard_memory_mb
    return None


def plan_limits(s: LimitSettings, controllers: frozenset[str]) -> LimitPlan:
    """Decide every limit file for a slice given the controllers the kernel offers."""
    plan = LimitPlan()
    hard = hard_memory_mb(s)
    if "memory" in controllers:
        if hard is not None:
            plan.writes["memory.max"] = str(hard * MB)
            plan.kernel.append(f"memory.max={hard}MB")
        low = s.low_memory_mb
        if s.memory_policy == "soft" and low is None:
            low = s.memory_mb  # soft: the slot's memory is protected, not capped
        if low is not None:
            plan.writes["memory.low"] = str(low * MB)
            plan.kernel.append(f"memory.low={low}MB")
        if s.disable_swap:
            plan.writes["memory.swap.max"] = "0"
            plan.kernel.append("memory.swap.max=0")
        plan.writes["memory.oom.group"] = "1"
    else:
        if hard is not None:
            plan.policy_memory_mb = hard
            plan.policy.append(f"memory<={hard}MB (measured RSS, job held at the limit)")
        if s.low_memory_mb is not None or s.memory_policy == "soft":
            plan.unenforced.append("memory.low")
        if s.disable_swap:
            plan.unenforced.append("swap")
    if "cpu" in controllers:
        plan.writes["cpu.weight"] = str(max(1, min(10_000, round(100 * s.cpus))))
        plan.kernel.append(f"cpu.weight={plan.writes['cpu.weight']}")
        if s.cpu_max_cpus is not None:
            quota = max(1000, round(s.cpu_max_cpus * CPU_MAX_PERIOD_USEC))
            plan.writes["cpu.max"] = f"{quota} {CPU_MAX_PERIOD_USEC}"
            plan.kernel.append(f"cpu.max={s.cpu_max_cpus}cpus")
    else:
        plan.unenforced.append("cpu.weight")
        if s.cpu_max_cpus is not None:
            plan.unenforced.append("cpu.max")
    if s.pids_max is not None:
        if "pids" in controllers:
            plan.writes["pids.max"] = str(s.pids_max)
            plan.kernel.append(f"pids.max={s.pids_max}")
        else:
            plan.unenforced.append("pids.max")
    return plan
